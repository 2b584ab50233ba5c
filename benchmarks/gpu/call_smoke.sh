#!/bin/bash
# `compare run --backends vllm,vllm-server` on one GPU (measured on an H200) with the
# Qwen2.5-7B architecture (dummy weights), a short chat workload at two concurrencies: the
# in-process engine and the OpenAI server (read by the HTTP client's receive thread) from one
# spec on vLLM 0.26. Results: $OUT/smoke.tgz.
# Needs VLLM_GPU_PAYLOAD=DIR (the offline vLLM payload, see device.sh) on a fresh machine and
# OUT=DIR, where the results are written.
set -uo pipefail
cd "$(dirname "$0")/../.."
DEADLINE=${DEADLINE:-560}
bash benchmarks/gpu/device.sh true || exit 2
mkdir -p /tmp/m7 && cp benchmarks/gpu/qwen2.5-7b-config.json /tmp/m7/config.json
timeout -k 15 $((DEADLINE - 20)) bash benchmarks/gpu/device.sh python3 -m compare.cli run \
    --backends vllm,vllm-server --spec benchmarks/gpu/h200.spec.yaml --model /tmp/m7 \
    --workload benchmarks/gpu/chat.workload.yaml --num-requests 128 --concurrency 16,64 --warmup 4 \
    --slo ttft_p95=2s,tpot_p95=50ms --timeout 300 --out /tmp/smoke --run-id smoke-h200 --format md \
    > /tmp/smoke.log 2>&1
echo "SMOKE rc=$? at ${SECONDS}s" | tee -a /tmp/smoke.log
tail -40 /tmp/smoke.log
tar czf $OUT/smoke.tgz -C /tmp smoke smoke.log 2>/dev/null
