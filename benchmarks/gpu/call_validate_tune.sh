#!/bin/bash
# On 2 GPUs (measured on 2x H200, docs/benchmarks.md): two lanes in parallel, one GPU each.
#   GPU 0: in-process throughput vs LLM.generate (`compare run --backends vllm` at burst, on
#          uvloop and on asyncio) + the vLLM server's Poisson rate levels.
#   GPU 1: `compare tune` on the chat workload (tuned vs default goodput).
# Own compile caches per lane (the same config compiled by two processes at once could collide).
# Results: $OUT/results.tgz (lane 0, rewritten after each phase) and $OUT/tune.tgz.
# Needs VLLM_GPU_PAYLOAD=DIR (the offline vLLM payload, see device.sh) on a fresh machine and
# OUT=DIR, where the results are written.
set -uo pipefail
cd "$(dirname "$0")/../.."
DEADLINE=${DEADLINE:-540}
bash benchmarks/gpu/device.sh true || exit 2
mkdir -p /tmp/m7 && cp benchmarks/gpu/qwen2.5-7b-config.json /tmp/m7/config.json
(
  export CUDA_VISIBLE_DEVICES=1 VLLM_CACHE_ROOT=/tmp/lane1/vllm TRITON_CACHE_DIR=/tmp/lane1/triton \
         TORCHINDUCTOR_CACHE_DIR=/tmp/lane1/inductor
  timeout -k 10 $((DEADLINE - 15)) bash benchmarks/gpu/device.sh python3 -m compare.cli tune --backend vllm \
      --spec benchmarks/gpu/h200.spec.yaml --model /tmp/m7 --workload benchmarks/gpu/chat.workload.yaml \
      --slo ttft_p95=2s,tpot_p95=50ms --budget ${TUNE_BUDGET:-4} \
      --knob max_num_seqs=64,128,256,512 --knob max_num_batched_tokens=2048,8192,16384 \
      --start-load 16 --max-probes 5 --repeats 2 --trial-timeout 240 --timeout 120 \
      --out /tmp/tune --run-id tune-h200 --cache-dir /tmp/tune-cache > /tmp/tune.log 2>&1
  echo "TUNE rc=$?" >> /tmp/tune.log
  tar czf $OUT/tune.tgz -C /tmp tune tune.log 2>/dev/null
) &
LANE1=$!
CUDA_VISIBLE_DEVICES=0 bash benchmarks/gpu/device.sh python3 benchmarks/gpu/validate.py --work /tmp/val \
    --pack $OUT/results.tgz --deadline-s $((DEADLINE - 20)) \
    --phases env,microbench,offline,inproc-burst,inproc-burst-asyncio,server-rates,report --burst-repeats 3
wait $LANE1
tail -5 /tmp/tune.log
ls -la $OUT
