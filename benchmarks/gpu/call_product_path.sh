#!/bin/bash
# The product-path benchmark (docs/benchmarks.md, "The product path") on two of a GPU machine's
# CPUs (client CPU 0, server CPU 1, as on a 2-vCPU VM; no GPU used). Prints the CPU model and its
# vector extensions first, so the figures name the instruction set they were measured on.
# Needs LITE_WHEELS=DIR (pydantic, pydantic-core, annotated-types, typing-inspection, msgspec
# wheels for the machine's Python; the image has the project's other dependencies) and OUT=DIR.
set -uo pipefail
cd "$(dirname "$0")/../.."
LITE=${LITE_WHEELS:?set LITE_WHEELS to a directory of wheels}
SITE=/tmp/site-lite
[ -f "$SITE/.ok" ] || { python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$LITE"/*.whl && touch "$SITE/.ok"; } || exit 2
export PYTHONPATH="$SITE:$(pwd)"
echo "kernel $(uname -r), $(nproc) CPUs, $(python3 --version)"
lscpu | grep -E '^(Model name|Thread|Core|Socket|NUMA node0)'
echo "vector extensions: $(grep -o -w -E 'avx2|avx512f|avx512_bf16|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"
python3 -m backends.http.native_build --dest "$SITE" 2>&1 | tail -2
python3 -c 'from backends.http import native; print("native:", native.status)'
for spec in ${PP_SPECS:-"512 10" "1024 5"}; do
    set -- $spec
    taskset -c 0,1 timeout 240 python3 benchmarks/bench_product_path.py --streams "$1" --rounds 3 --tokens 96 \
        --ttft-ms 50 --itl-ms "$2" --repeat "${PP_REPEAT:-4}" --modes bench,run --json "$OUT/product-path-$1.json"
done
