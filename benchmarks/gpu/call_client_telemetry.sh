#!/bin/bash
# On one GPU host (measured on an H200 with 16 CPU cores, docs/benchmarks.md), three short phases:
# 1. `compare run --backends vllm-server` on the chat workload at c16 and c64: per-level telemetry
#    (NVML utilization/power/energy and output tokens per joule; CPU of the engine core, API server
#    and client), server-side time breakdown and the C receive path, on a real GPU server.
# 2. benchmarks/bench_client_procs.py: the offered load 1, 2 and 4 client processes can follow.
# 3. benchmarks/bench_client.py: the exact-timing scenario (512 streams x 10 ms per token) and the
#    zero-delay ingestion ceiling of one client process on this host's cores.
# Results: $OUT/telemetry.tgz, $OUT/client_procs.json, $OUT/client.json, $OUT/logs.tgz.
# Needs VLLM_GPU_PAYLOAD=DIR (the offline vLLM payload, see device.sh) on a fresh machine and
# OUT=DIR, where the results are written.
set -uo pipefail
cd "$(dirname "$0")/../.."
bash benchmarks/gpu/device.sh true || exit 2
mkdir -p /tmp/m7 && cp benchmarks/gpu/qwen2.5-7b-config.json /tmp/m7/config.json
timeout -k 10 ${RUN_S:-180} bash benchmarks/gpu/device.sh python3 -m compare.cli run --backends vllm-server \
    --spec benchmarks/gpu/h200.spec.yaml --model /tmp/m7 --workload benchmarks/gpu/chat.workload.yaml \
    --num-requests 256 --concurrency 16,64 --warmup 4 --slo ttft_p95=2s,tpot_p95=50ms --timeout 120 \
    --out /tmp/tel --run-id telemetry-h200 > /tmp/tel.log 2>&1
echo "TELEMETRY rc=$? at ${SECONDS}s" | tee -a /tmp/tel.log
tar czf $OUT/telemetry.tgz -C /tmp tel tel.log 2>/dev/null
grep -v -E "^(INFO|DEBUG|WARNING|\(APIServer|\(EngineCore)" /tmp/tel.log | tail -30
timeout -k 10 ${PROCS_S:-120} bash benchmarks/gpu/device.sh python3 benchmarks/bench_client_procs.py --procs 1,2,4 \
    --streams ${STREAMS:-1000,2000,4000,8000} --json $OUT/client_procs.json > /tmp/procs.log 2>&1
echo "PROCS rc=$? at ${SECONDS}s" | tee -a /tmp/procs.log
tail -20 /tmp/procs.log
timeout -k 10 ${CLIENT_S:-60} bash benchmarks/gpu/device.sh python3 benchmarks/bench_client.py --scenario --streams 512 \
    --ttft-ms 50 --itl-ms 10 --tokens 96 --ceiling 512 --json $OUT/client.json > /tmp/client.log 2>&1
echo "CLIENT rc=$? at ${SECONDS}s" | tee -a /tmp/client.log
tail -12 /tmp/client.log
tar czf $OUT/logs.tgz -C /tmp procs.log client.log 2>/dev/null
ls -la $OUT
