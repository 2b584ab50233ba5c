#!/usr/bin/env bash
# Builds the HTTP client's optional native helpers (backends/http/_native.c + _rxthread.c) into .venv as the
# module _llm_compare_http. Optional: without a C compiler or Python headers (e.g. a GPU box)
# this step only says so, and backends/http/native.py falls back to the pure-Python path (same
# results, more CPU per streamed event; docs/benchmarks.md, issue 3). Idempotent: the module
# records the sha256 of the source it was built from; an up-to-date build returns at once, and
# native.py ignores a build whose recorded sha does not match the source in the checkout.
set -euo pipefail
cd "$(dirname "$0")/../.."
log() { printf '[setup:http-native] %s\n' "$*" >&2; }

PY=.venv/bin/python
SRC=(backends/http/_native.c backends/http/_rxthread.c)
[ -x "$PY" ] || { log "no .venv: skipped"; exit 0; }
# the sources' sha256 (of both files, in this order): backends/http/native.py computes the same
sha="$(cat "${SRC[@]}" | sha256sum | cut -c1-64)"
if [ "$("$PY" -c 'import _llm_compare_http as m; print(m.SOURCE_SHA)' 2>/dev/null)" = "$sha" ]; then
  exit 0
fi
CC=${CC:-gcc}
inc="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
if ! command -v "$CC" >/dev/null || [ ! -f "$inc/Python.h" ]; then
  log "no C compiler ($CC) or no Python.h in $inc: the pure-Python path will be used"
  exit 0
fi
dest="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')/_llm_compare_http$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')"
tmp="$(mktemp "${dest}.XXXXXX")"
if "$CC" -O2 -Wall -Werror -shared -fPIC -I"$inc" -DSOURCE_SHA="\"$sha\"" -o "$tmp" "${SRC[@]}" -lpthread; then
  mv -f "$tmp" "$dest"
  log "built $dest"
else
  rm -f "$tmp"
  log "build failed: the pure-Python path will be used"
fi
