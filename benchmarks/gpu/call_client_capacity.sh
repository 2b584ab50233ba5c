#!/bin/bash
# On a GPU host's CPUs (no GPU used; measured on the H200 host's 16 cores, docs/benchmarks.md), after
# a change to the HTTP client's load generation: the native helpers built for this host's Python, then
# 1. the exact-timing scenario (512 closed-loop streams x 3 requests x 96 tokens, TTFT 50 ms, ITL 10 ms)
#    with the client on CPU 0 and the loopback server in 4 processes on the others, REPEATS times, then
#    once with a one-process server, and the zero-delay ceiling (bench_client.py --scenario);
# 2. the offered load 1 and 2 client processes follow (ROUNDS requests per stream, the steady rate)
#    against a server of SERVER_PROCS processes on the last CPUs (bench_client_procs.py).
# Results: $OUT/scenario-N.json, $OUT/client_procs.json, $OUT/client-capacity-logs.tgz.
# Needs VLLM_GPU_PAYLOAD=DIR (the offline payload, see device.sh: its site-packages) on a fresh
# machine and OUT=DIR, where the results are written.
set -uo pipefail
cd "$(dirname "$0")/../.."
DEADLINE=${DEADLINE:-420}
bash benchmarks/gpu/device.sh true || exit 2
bash benchmarks/gpu/device.sh python3 -m backends.http.native_build --dest /tmp/site > /tmp/native.log 2>&1
echo "NATIVE rc=$?: $(tail -1 /tmp/native.log)"
S="--scenario --streams 512 --ttft-ms 50 --itl-ms 10 --tokens 96 --rounds 3"
for i in $(seq 1 ${REPEATS:-3}); do  # (REPEATS=0: only the client-process table)
    timeout -k 5 60 bash benchmarks/gpu/device.sh python3 benchmarks/bench_client.py $S --server-procs 4 \
        --json $OUT/scenario-$i.json >> /tmp/scenario.log 2>&1
    echo "SCENARIO $i rc=$? at ${SECONDS}s"; tail -1 /tmp/scenario.log
done
if [ "${REPEATS:-3}" != 0 ]; then
    timeout -k 5 90 bash benchmarks/gpu/device.sh python3 benchmarks/bench_client.py $S --server-procs 1 --ceiling 512 \
        --json $OUT/scenario-one-server-proc.json >> /tmp/scenario.log 2>&1
    echo "SCENARIO one server process + ceiling rc=$? at ${SECONDS}s"; tail -2 /tmp/scenario.log
fi
LEFT=$((DEADLINE - SECONDS - 10))
[ $LEFT -gt 30 ] && timeout -k 5 $LEFT bash benchmarks/gpu/device.sh python3 benchmarks/bench_client_procs.py \
    --procs 1,2 --server-procs ${SERVER_PROCS:-8} --streams ${STREAMS:-2000,2200,2400,4000,4400,4800} --rounds ${ROUNDS:-3} \
    --json $OUT/client_procs.json > /tmp/procs.log 2>&1
echo "PROCS rc=$? at ${SECONDS}s"
tail -14 /tmp/procs.log
tar czf $OUT/client-capacity-logs.tgz -C /tmp native.log scenario.log procs.log 2>/dev/null
ls -la $OUT
