#!/usr/bin/env bash
# tier: test
# Byte-compiles the virtual environments once (.venv, .venv-quant): a test-tier step, since the suite
# starts dozens of engines. The default tier does without: scripts/run-default.sh lets Python write
# the .pyc of what the run imports, on first import (the first run compiles what it imports, once,
# instead of every file of the venvs up front: 1-3 min on 2 cores).
# Why: uv installs without .pyc files, and where PYTHONDONTWRITEBYTECODE=1 is set (as on these
# machines) Python never writes them either, so EVERY process re-compiles torch/vllm/transformers
# from source: `import vllm` took 30 s instead of ~6 s, and a vLLM engine start imports it in three
# processes (front end, EngineCore, worker: 95 s -> 30 s per start on the 2-core machine).
# compileall writes .pyc whatever PYTHONDONTWRITEBYTECODE says.
# Only where PYTHONDONTWRITEBYTECODE is set: otherwise Python writes each module's .pyc the first
# time it imports it, and compiling every file of the venvs up front (1-2 min) buys nothing.
# Idempotent: a stamp records the installed distributions (their dist-info names); a second run
# with the same set returns at once, and an install of anything new re-runs it (compileall skips files already compiled).
set -euo pipefail
cd "$(dirname "$0")/../.."
log() { printf '[setup:bytecode] %s\n' "$*" >&2; }

if [ -z "${PYTHONDONTWRITEBYTECODE:-}" ]; then
  exit 0
fi
stamp=.venv/.llm-compare-bytecode
purelib() { "$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
want="$(for v in .venv .venv-quant; do if [ -x "$v/bin/python" ]; then ls -d "$(purelib "$v")"/*.dist-info; fi; done \
        | sha256sum | cut -c1-16)"
[ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && exit 0
for venv in .venv .venv-quant; do
  [ -x "$venv/bin/python" ] || continue
  log "compiling $venv (once, ~1-2 min)"
  # some files in site-packages are test data with newer syntax (torch's py312 intrinsics): they
  # fail to compile and are never imported, so a non-zero exit here is expected
  "$venv/bin/python" -m compileall -q -q -j 0 "$(purelib "$venv")" || true
done
echo "$want" > "$stamp"
