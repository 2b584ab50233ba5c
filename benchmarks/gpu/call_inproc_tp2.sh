#!/bin/bash
# On 2 GPUs (measured on 2x H200, docs/benchmarks.md):
#  1. in-process vLLM vs LLM.generate: `compare run --backends vllm` burst (3 engine starts) on
#     GPU 0, then LLM.generate pinned to the scheduler limits that engine resolved.
#  2. TP=2 single-stream decode through the OpenAI server with its log kept, and the GPU topology
#     (`nvidia-smi topo -m`), for the per-token latency of TP=2 vs one TP=1 engine.
# Needs VLLM_GPU_PAYLOAD=DIR (the offline vLLM payload, see device.sh) on a fresh machine and
# OUT=DIR, where the results are written.
set -uo pipefail
cd "$(dirname "$0")/../.."
bash benchmarks/gpu/device.sh true || exit 2
CUDA_VISIBLE_DEVICES=0 bash benchmarks/gpu/device.sh python3 benchmarks/gpu/validate.py --work /tmp/val3 \
    --pack $OUT/results.tgz --deadline-s ${DEADLINE1:-300} \
    --phases env,microbench,inproc-burst,offline,report --burst-repeats 3
sed -n '/burst level/,/^$/p' /tmp/val3/report.md
{ nvidia-smi topo -m; nvidia-smi nvlink -s 2>&1 | head -20; } > /tmp/topo-gpu.txt 2>&1
mkdir -p /tmp/m7 && cp benchmarks/gpu/qwen2.5-7b-config.json /tmp/m7/config.json
timeout -k 15 ${DEADLINE2:-200} bash benchmarks/gpu/device.sh python3 -m compare.cli run --backends 'tp@2*vllm-server' \
    --spec benchmarks/gpu/h200.spec.yaml --model /tmp/m7 --workload benchmarks/gpu/topology.workload.yaml \
    --num-requests 24 --concurrency 1 --warmup 2 --timeout 120 --out /tmp/tp2 --run-id tp2-diag > /tmp/tp2.log 2>&1
echo "TP2 rc=$?" >> /tmp/tp2.log
tar czf $OUT/tp2.tgz -C /tmp tp2 tp2.log topo-gpu.txt 2>/dev/null
cat /tmp/topo-gpu.txt | head -12
grep -hiE "custom.?all.?reduce|allreduce|symm|nccl|p2p|cuda ?graph" /tmp/tp2/tp2-diag/*/*.log 2>/dev/null | cut -c1-220 | head -20
ls -la $OUT
