#!/usr/bin/env bash
# tier: default
# Builds the HTTP client's optional native helpers (backends/http/_native.c + _rxthread.c, _stamp.h) into
# .venv as the module _llm_compare_http, with the one build recipe (backends/http/native_build.py,
# also what a pip-installed machine runs: python -m backends.http.native_build). Optional: without
# a C compiler or Python headers (e.g. a GPU box) this step only says so, and
# backends/http/native.py falls back to the pure-Python path (same results, more CPU per streamed
# event, the event loop reads the sockets; docs/benchmarks.md, HTTP client). Idempotent: an up-to-date
# build (same sources sha) returns at once, and native.py ignores a build whose recorded sha does
# not match the sources in the checkout.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -x .venv/bin/python ] || { echo "[setup:http-native] no .venv: skipped" >&2; exit 0; }
exec .venv/bin/python -m backends.http.native_build
