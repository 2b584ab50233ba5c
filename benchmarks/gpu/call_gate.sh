#!/bin/bash
# Regression-gate power on one GPU (measured on an H200, docs/benchmarks.md "Gate power (H200)"):
# config A (the spec's defaults) and config B (a scheduler limit, SLOW, default max_num_seqs=56 at
# concurrency 64: 8 of 64 requests always wait for a slot) measured A B A B ... ROUNDS times, each
# repeat on a fresh in-process engine (the runner's --repeats), then benchmarks/bench_gate.py's
# evaluate: A/A false alarms and detection of B and of an exact 10% slowdown at 3 repeats a side.
# Results: $OUT/gate.tgz (the results directory, the log, the evaluation).
# Needs VLLM_GPU_PAYLOAD=DIR (the offline vLLM payload, see device.sh) on a fresh machine and
# OUT=DIR, where the results are written.
set -uo pipefail
cd "$(dirname "$0")/../.."
DEADLINE=${DEADLINE:-570}
ROUNDS=${ROUNDS:-6}
SLOW=${SLOW:-max_num_seqs=56}
bash benchmarks/gpu/device.sh true || exit 2
mkdir -p /tmp/m7 && cp benchmarks/gpu/qwen2.5-7b-config.json /tmp/m7/config.json
pack() { tar czf $OUT/gate.tgz.tmp -C /tmp gate gate.log gate-eval.json 2>/dev/null; mv $OUT/gate.tgz.tmp $OUT/gate.tgz; }
timeout -k 15 $((DEADLINE - 20)) bash benchmarks/gpu/device.sh python3 benchmarks/bench_gate.py record \
    --mode restart --rounds "$ROUNDS" --spec benchmarks/gpu/h200.spec.yaml --model /tmp/m7 \
    --workload benchmarks/gpu/gate.workload.yaml --num-requests ${NUM_REQUESTS:-256} --concurrency 64 \
    --warmup 4 --slow-native "$SLOW" --out /tmp/gate > /tmp/gate.log 2>&1
echo "GATE rc=$? at ${SECONDS}s" | tee -a /tmp/gate.log
d=$(ls -d /tmp/gate/gate-* 2>/dev/null | head -1)
[ -n "$d" ] && bash benchmarks/gpu/device.sh python3 benchmarks/bench_gate.py evaluate "$d" > /tmp/gate-eval.json 2>>/tmp/gate.log
pack
grep -E "recorded|GATE|Error|error" /tmp/gate.log | tail -8
python3 -c "import json;d=json.load(open('/tmp/gate-eval.json'));print(json.dumps({k:d[k] for k in ('recorded_repeats','measured_effect_B_vs_A')}));print(json.dumps(d['grid'][0]))" 2>/dev/null
ls -la $OUT
