#!/bin/bash
# On 2 GPUs (measured on 2x H200, docs/benchmarks.md): TP=2 vs 2 replicas of the Qwen2.5-7B
# architecture under a Poisson arrival process and an SLO, through vLLM's OpenAI server (one server
# per engine, so the two replicas do not share one Python frontend), then, if time is left before
# DEADLINE, the failure cost of losing one replica. Offline reference for the same shape (512 x
# (512->128), LLM.generate on 2x H200): replicas 15,651 out tok/s at 4.76 ms/token, TP=2 13,457
# out tok/s at 3.23 ms/token.
# Needs VLLM_GPU_PAYLOAD=DIR (the offline vLLM payload, see device.sh) on a fresh machine and
# OUT=DIR, where the results are written.
set -uo pipefail
cd "$(dirname "$0")/../.."
DEADLINE=${DEADLINE:-560}
bash benchmarks/gpu/device.sh true || exit 2
mkdir -p /tmp/m7 && cp benchmarks/gpu/qwen2.5-7b-config.json /tmp/m7/config.json
SLO=${SLO:-ttft_p95=2s,tpot_p95=20ms}
common=(--spec benchmarks/gpu/h200.spec.yaml --model /tmp/m7 --workload benchmarks/gpu/topology.workload.yaml
        --slo "$SLO" --warmup 2 --timeout 300 --out /tmp/topo)
pack() { tar czf $OUT/topo.tgz.tmp -C /tmp topo topo.log kill.log 2>/dev/null; mv $OUT/topo.tgz.tmp $OUT/topo.tgz; }
timeout -k 15 $((DEADLINE - 30)) bash benchmarks/gpu/device.sh python3 -m compare.cli run \
    --backends 'tp@2*vllm-server,replicas@2*vllm-server:lb=lor' --rate ${RATES:-30,60,120,inf} \
    --run-id topo-h200 "${common[@]}" > /tmp/topo.log 2>&1
echo "TOPO rc=$? at ${SECONDS}s" | tee -a /tmp/topo.log
pack
if [ $SECONDS -lt $((DEADLINE - 150)) ]; then
  # failure cost: one replica SIGKILLed 3 s into the 60 req/s level
  timeout -k 15 $((DEADLINE - SECONDS - 10)) bash benchmarks/gpu/device.sh python3 -m compare.cli run \
      --backends 'replicas@2*vllm-server:lb=lor:kill=3@r60' --rate 60 --run-id topo-kill-h200 "${common[@]}" > /tmp/kill.log 2>&1
  echo "KILL rc=$? at ${SECONDS}s" | tee -a /tmp/kill.log
  pack
fi
tail -25 /tmp/topo.log
ls -la $OUT
