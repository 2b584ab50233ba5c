#!/bin/bash
# Entry point on the lent GPU machine: install the carried offline payload once per machine, set
# the engine environment (benchmarks/gpu/common.py ENGINE_ENV, the one place it is defined), then
# run "$@" from the repo root.
#   carried:  .gpu/payload/{part00,SHA256SUMS}  (vLLM 0.26.0 for sm_90 + wheels; see ../shared/gpu)
#             .whl/*.whl                          (optional extra wheels, e.g. optuna for `compare tune`)
#   usage:    bash benchmarks/gpu/device.sh python3 benchmarks/gpu/validate.py ...
set -uo pipefail
cd "$(dirname "$0")/../.."
SITE=${VLLM_SITE:-/tmp/site}
say() { echo "DEVICE [$SECONDS s] $*"; }
if [ ! -f "$SITE/.extracted_ok" ]; then
    (cd .gpu/payload && sha256sum --quiet -c SHA256SUMS) || { say "payload checksum mismatch"; exit 2; }
    rm -rf "$SITE" && mkdir -p "$SITE"
    python3 -c '
import sys, tarfile
t = tarfile.open(fileobj=sys.stdin.buffer, mode="r|xz")
t.extractall(sys.argv[1], filter="fully_trusted")
' "$SITE" < .gpu/payload/part00 || { say "payload extraction failed"; exit 2; }
    touch "$SITE/.extracted_ok"
    say "payload extracted into $SITE"
fi
if compgen -G ".whl/*.whl" > /dev/null && [ ! -f "$SITE/.whl_ok" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl \
        || { say "wheel install failed"; exit 2; }
    touch "$SITE/.whl_ok"
    say "extra wheels installed: $(ls .whl | tr '\n' ' ')"
fi
export PYTHONPATH="$SITE:$(pwd)"
eval "$(python3 -c 'from benchmarks.gpu.common import ENGINE_ENV as E; print("\n".join(f"export {k}={v}" for k, v in E.items()))')"
exec "$@"
