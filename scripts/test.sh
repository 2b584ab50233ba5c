#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh), then runs the whole test suite, real engines included.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PYTHONUNBUFFERED=1
exec .venv/bin/python -m pytest -p no:cacheprovider -ra "$@" tests
