#!/usr/bin/env bash
# Sets up the default tier (scripts/setup.sh --tier default: .venv, the OpenVINO exporter venv, the
# tiny model; not Docker, Chromium, Ray or the other test-tier steps), then runs the embedded
# default: vLLM vs OpenVINO GenAI (two serving engines) with the transformers reference, on a tiny
# local model, on CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --tier default
# where PYTHONDONTWRITEBYTECODE is set, every process would compile torch/vLLM/transformers from
# source on every import (an engine start: ~95 s instead of ~30 s); the default tier does not
# byte-compile the venv up front (scripts/setup.d/90-bytecode.sh is a test-tier step), so this run
# writes the .pyc of what it imports, once, into .venv
exec env -u PYTHONDONTWRITEBYTECODE .venv/bin/compare run "$@"
