#!/usr/bin/env bash
# The test suite. Tiers (markers, pyproject.toml):
#   bash scripts/test.sh          every tier: sets everything up (scripts/setup.sh, both tiers), then
#                                 runs the whole suite, real engines and containers included
#   bash scripts/test.sh --fast   the fast tier, `-m "not engine and not docker and not slow"`: no
#                                 engine, server, container or cluster starts (tests/conftest.py refuses
#                                 one from a test not marked for it) and no model training; a minute or
#                                 two. Runs the default set-up tier only when .venv does not exist.
# Extra arguments go to pytest (`bash scripts/test.sh -k gate`, `bash scripts/test.sh --fast -x`).
set -euo pipefail
cd "$(dirname "$0")/.."
fast=0
args=()
for a in "$@"; do
  if [ "$a" = "--fast" ]; then fast=1; else args+=("$a"); fi
done
export PYTHONUNBUFFERED=1
# The project's own modules, byte-compiled once: every `compare` command a test runs (hundreds) and
# every engine process imports them, and where PYTHONDONTWRITEBYTECODE is set each of those would
# compile them from source again (compileall writes .pyc whatever that variable says; the
# interpreter reads them either way). Idempotent: unchanged files are skipped.
compile_project() {
  .venv/bin/python -m compileall -q -q -j 0 core adapters backends compare containers >/dev/null 2>&1 || true
}
if [ "$fast" = 1 ]; then
  [ -x .venv/bin/python ] || bash scripts/setup.sh --tier default
  compile_project
  # two workers: the fast tier is many short tests plus a few CPU-bound ones (training steps,
  # loopback servers); tests/scheduling.py hands out whole files (their module fixtures run once),
  # the longest first
  exec .venv/bin/python -m pytest -p no:cacheprovider -n "${LLM_COMPARE_TEST_WORKERS:-2}" -ra \
    -m "not engine and not docker and not slow" "${args[@]}" tests
fi
bash scripts/setup.sh
compile_project
# Two pytest-xdist workers: the suite is real engine starts, mostly single-threaded imports, so a
# second worker uses the second core (tests/scheduling.py keeps shared engine fixtures on one
# worker and starts the longest groups first). LLM_COMPARE_TEST_WORKERS=0 runs serially.
workers="${LLM_COMPARE_TEST_WORKERS:-2}"
if [ "$workers" = "0" ]; then
  exec .venv/bin/python -m pytest -p no:cacheprovider -p no:xdist -ra "${args[@]}" tests
fi
exec .venv/bin/python -m pytest -p no:cacheprovider -n "$workers" -ra "${args[@]}" tests
