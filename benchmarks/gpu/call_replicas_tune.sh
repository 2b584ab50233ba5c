#!/bin/bash
# One GPU (measured on an H200, docs/benchmarks.md): two phases, each results folder packed as it ends.
# 1. Losing a replica: two vLLM OpenAI servers sharing the one GPU (per_device=2: each with half of
#    the spec's gpu_memory_utilization) behind the client's least-outstanding balancer, Poisson
#    arrivals at 30 req/s (healthy) then 60 req/s with replica 1 SIGKILLed 3 s into that level, under
#    the SLO; the run keeps going and records the failure's cost. $OUT/replicas.tgz.
# 2. Tuned vs default (if time is left before DEADLINE): `compare tune` on the chat workload with
#    the SLO against vLLM's server defaults. Needs optuna (+ alembic, sqlalchemy, mako, colorlog)
#    wheels in .whl/. $OUT/tune.tgz.
# Needs VLLM_GPU_PAYLOAD=DIR (the offline vLLM payload, see device.sh) on a fresh machine and
# OUT=DIR, where the results are written.
set -uo pipefail
cd "$(dirname "$0")/../.."
DEADLINE=${DEADLINE:-570}
SLO=${SLO:-ttft_p95=2s,tpot_p95=50ms}
bash benchmarks/gpu/device.sh true || exit 2
mkdir -p /tmp/m7 && cp benchmarks/gpu/qwen2.5-7b-config.json /tmp/m7/config.json
timeout -k 15 ${REPLICA_S:-240} bash benchmarks/gpu/device.sh python3 -m compare.cli run \
    --backends 'replicas@2*vllm-server:lb=lor:per_device=2:kill=3@r60' --rate 30,60 \
    --spec benchmarks/gpu/h200.spec.yaml --model /tmp/m7 --workload benchmarks/gpu/topology.workload.yaml \
    --slo "$SLO" --warmup 2 --timeout 300 --out /tmp/replicas --run-id replicas-kill-h200 > /tmp/replicas.log 2>&1
echo "REPLICAS rc=$? at ${SECONDS}s" | tee -a /tmp/replicas.log
tar czf $OUT/replicas.tgz -C /tmp replicas replicas.log 2>/dev/null
tail -30 /tmp/replicas.log
LEFT=$((DEADLINE - SECONDS - 15))
if [ $LEFT -gt 150 ]; then
  timeout -k 10 $LEFT bash benchmarks/gpu/device.sh python3 -m compare.cli tune --backend vllm \
      --spec benchmarks/gpu/h200.spec.yaml --model /tmp/m7 --workload benchmarks/gpu/chat.workload.yaml \
      --num-requests 512 --slo "$SLO" --budget ${TUNE_BUDGET:-3} \
      --knob max_num_seqs=128,256,512,1024 --knob max_num_batched_tokens=2048,8192,16384 \
      --start-load 32 --max-probes 6 --repeats 2 --trial-timeout 200 --timeout 120 \
      --out /tmp/tune --run-id tune-h200 --cache-dir /tmp/tune-cache > /tmp/tune.log 2>&1
  echo "TUNE rc=$? at ${SECONDS}s" | tee -a /tmp/tune.log
  tar czf $OUT/tune.tgz -C /tmp tune tune.log 2>/dev/null
  tail -25 /tmp/tune.log
fi
ls -la $OUT
