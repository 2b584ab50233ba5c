#!/usr/bin/env bash
# Sets up the default tier (scripts/setup.sh --tier default: .venv, the OpenVINO exporter venv, the
# tiny model; not Docker, Chromium, Ray or the other test-tier steps), then runs the embedded
# default: vLLM vs OpenVINO GenAI (two serving engines) with the transformers reference, on a tiny
# local model, on CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --tier default
exec .venv/bin/compare run "$@"
