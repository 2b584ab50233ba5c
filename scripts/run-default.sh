#!/usr/bin/env bash
# Sets everything up, then runs the embedded default: vLLM vs OpenVINO GenAI (two serving engines)
# with the transformers reference, on a tiny local model, on CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/compare run "$@"
