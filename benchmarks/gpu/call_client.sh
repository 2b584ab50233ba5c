#!/bin/bash
# The HTTP client benchmark (docs/benchmarks.md, HTTP client) on a GPU machine's CPUs (no GPU
# used), with the client's native helpers built there when it has a compiler.
# Prints the kernel, the build outcome and whether kernel receive stamps exist there, then
# benchmarks/bench_client.py with the receive thread (default) and with the event loop reading.
# Needs VLLM_GPU_PAYLOAD=DIR (the offline vLLM payload, see device.sh) on a fresh machine and
# OUT=DIR, where the results are written.
set -uo pipefail
cd "$(dirname "$0")/../.."
bash benchmarks/gpu/device.sh true || exit 2
SITE=${VLLM_SITE:-/tmp/site}
echo "kernel $(uname -r), $(nproc) CPUs, $(python3 --version)"
# the one build recipe (also what a pip-installed GPU box runs), into the carried site dir
PYTHONPATH="$SITE:$(pwd)" python3 -m backends.http.native_build --dest "$SITE"
run() { bash benchmarks/gpu/device.sh "$@"; }
run python3 -c 'from backends.http import native, rxstamp; print("native:", native.status, "| RxThread:", native.RxThread is not None, "| kernel stamps:", rxstamp.kernel_stamps(), "| reader:", rxstamp.reader_name())'
run timeout 200 python3 benchmarks/bench_client.py --streams 200,2000,2000,2000 --json "$OUT/client-thread.json"
LLM_COMPARE_RX_THREAD=0 run timeout 120 python3 benchmarks/bench_client.py --streams 2000,2000 --json "$OUT/client-loop.json"
