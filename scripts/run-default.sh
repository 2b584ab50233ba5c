#!/usr/bin/env bash
# Sets everything up, then runs the embedded default: vllm vs transformers on a tiny local model, on CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/compare run "$@"
