#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh), then runs the whole test suite, real engines included.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PYTHONUNBUFFERED=1
# Two pytest-xdist workers: the suite is real engine starts, mostly single-threaded imports, so a
# second worker uses the second core (tests/scheduling.py keeps shared engine fixtures on one
# worker and starts the longest groups first). LLM_COMPARE_TEST_WORKERS=0 runs serially.
workers="${LLM_COMPARE_TEST_WORKERS:-2}"
if [ "$workers" = "0" ]; then
  exec .venv/bin/python -m pytest -p no:cacheprovider -p no:xdist -ra "$@" tests
fi
exec .venv/bin/python -m pytest -p no:cacheprovider -n "$workers" -ra "$@" tests
