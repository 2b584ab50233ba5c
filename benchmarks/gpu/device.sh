#!/bin/bash
# Entry point on a GPU machine without network access: install the offline vLLM payload once per
# machine, set the engine environment (benchmarks/gpu/common.py ENGINE_ENV, the one place it is
# defined), then run "$@" from the repo root.
#   VLLM_GPU_PAYLOAD=DIR  the payload: SHA256SUMS plus the parts it lists, which concatenated in
#                         name order are one xz-compressed tar of a site-packages tree -- the
#                         format `compare bundle --out DIR --have benchmarks/gpu/h200-packages.txt`
#                         writes (vLLM 0.26.0 for sm_90 + the wheels the image lacks). Needed until
#                         the payload has been extracted into VLLM_SITE on this machine.
#   VLLM_SITE=DIR         where it is extracted (default /tmp/site)
#   .whl/*.whl            optional extra wheels installed into VLLM_SITE (e.g. optuna for `compare tune`)
#   usage:    VLLM_GPU_PAYLOAD=DIR bash benchmarks/gpu/device.sh python3 benchmarks/gpu/validate.py ...
set -uo pipefail
cd "$(dirname "$0")/../.."
SITE=${VLLM_SITE:-/tmp/site}
say() { echo "DEVICE [$SECONDS s] $*"; }
if [ ! -f "$SITE/.extracted_ok" ]; then
    PAYLOAD=${VLLM_GPU_PAYLOAD:-}
    [ -n "$PAYLOAD" ] && [ -f "$PAYLOAD/SHA256SUMS" ] || {
        echo "device.sh: set VLLM_GPU_PAYLOAD to a directory holding SHA256SUMS and the payload parts it lists (made by compare bundle)" >&2; exit 2; }
    PAYLOAD=$(cd "$PAYLOAD" && pwd)
    (cd "$PAYLOAD" && sha256sum --quiet -c SHA256SUMS) || { say "payload checksum mismatch in $PAYLOAD"; exit 2; }
    rm -rf "$SITE" && mkdir -p "$SITE"
    (cd "$PAYLOAD" && cat $(awk '{print $2}' SHA256SUMS | sort)) | python3 -c '
import sys, tarfile
t = tarfile.open(fileobj=sys.stdin.buffer, mode="r|xz")
t.extractall(sys.argv[1], filter="fully_trusted")
' "$SITE" || { say "payload extraction failed"; exit 2; }
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
