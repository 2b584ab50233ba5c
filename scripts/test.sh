#!/usr/bin/env bash
# The test suite. Tiers (markers, pyproject.toml):
#   bash scripts/test.sh          every tier: sets everything up (scripts/setup.sh, both tiers), then
#                                 runs the whole suite, real engines and containers included, then
#                                 the `isa` tests again as an AVX2-only and an AVX-512 (no AMX) CPU
#   bash scripts/test.sh --fast   the fast tier, `-m "not engine and not docker and not slow"`: no
#                                 engine, server, container or cluster starts (tests/conftest.py refuses
#                                 one from a test not marked for it) and no model training; a minute or
#                                 two. Runs the default set-up tier only when .venv does not exist.
# Extra arguments go to pytest (`bash scripts/test.sh -k gate`, `bash scripts/test.sh --fast -x`); with
# them, the suite runs once, on this CPU as it is.
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
# The type checker over the packages pyproject.toml's [tool.mypy] names (seconds)
typecheck() {
  echo "== mypy ($(.venv/bin/python -m mypy --version))"
  .venv/bin/python -m mypy
}
if [ "$fast" = 1 ]; then
  [ -x .venv/bin/python ] || bash scripts/setup.sh --tier default
  compile_project
  typecheck
  # two workers: the fast tier is many short tests plus a few CPU-bound ones (training steps,
  # loopback servers); tests/scheduling.py hands out whole files (their module fixtures run once),
  # the longest first
  exec .venv/bin/python -m pytest -p no:cacheprovider -n "${LLM_COMPARE_TEST_WORKERS:-2}" -ra \
    -m "not engine and not docker and not slow" "${args[@]}" tests
fi
bash scripts/setup.sh
compile_project
typecheck
# Two pytest-xdist workers: the suite is real engine starts, mostly single-threaded imports, so a
# second worker uses the second core (tests/scheduling.py keeps shared engine fixtures on one
# worker and starts the longest groups first). LLM_COMPARE_TEST_WORKERS=0 runs serially.
workers="${LLM_COMPARE_TEST_WORKERS:-2}"
xdist=(-n "$workers")
[ "$workers" = "0" ] && xdist=(-p no:xdist)
if [ "${#args[@]}" -gt 0 ]; then
  exec .venv/bin/python -m pytest -p no:cacheprovider "${xdist[@]}" -ra "${args[@]}" tests
fi
# The whole suite on this CPU as it is, then the tests marked `isa` (their outcome depends on the
# instruction sets) again as an AVX2-only CPU and as an AVX-512 one without AMX would answer
# (LLM_COMPARE_CPU_ISA lowers what the tool believes: core/hardware.py), so no assertion holds on
# one kind of host only. One closing line counts all three passes.
# LLM_COMPARE_TEST_REPORTS=DIR keeps the passes' JUnit reports there (benchmarks/suite_share.py reads them)
reports="${LLM_COMPARE_TEST_REPORTS:-}"
if [ -z "$reports" ]; then
  reports="$(mktemp -d)"
  trap 'rm -rf "$reports"' EXIT
fi
mkdir -p "$reports"
rc=0
.venv/bin/python -m pytest -p no:cacheprovider "${xdist[@]}" -ra --junitxml="$reports/host.xml" tests || rc=$?
for isa in avx2 avx512; do
  echo "== the instruction-set tests again with LLM_COMPARE_CPU_ISA=$isa"
  r=0
  LLM_COMPARE_CPU_ISA=$isa .venv/bin/python -m pytest -p no:cacheprovider "${xdist[@]}" -q -ra -m isa \
    --junitxml="$reports/$isa.xml" tests || r=$?
  [ "$r" = 5 ] && r=0  # nothing marked: nothing to fail
  [ "$rc" != 0 ] || rc=$r
done
.venv/bin/python - "$reports" <<'PY'
import sys, pathlib, xml.etree.ElementTree as ET
n = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
for f in sorted(pathlib.Path(sys.argv[1]).glob("*.xml")):
    for suite in ET.parse(f).getroot().iter("testsuite"):
        for k in n:
            n[k] += int(suite.get(k, 0))
failed = n["failures"] + n["errors"]
print(f"all passes: {n['tests'] - failed - n['skipped']} passed, {failed} failed, {n['skipped']} skipped")
PY
exit "$rc"
