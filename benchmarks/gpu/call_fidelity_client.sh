#!/bin/bash
# On one GPU host (measured on an H200 with 16 CPU cores, docs/benchmarks.md), after a change to the
# in-process backend or the HTTP client:
# 1. fidelity: the in-process backend's burst throughput vs vLLM's own LLM.generate on the same
#    requests and engine config (validate.py phases inproc-burst + offline + report);
# 2. the HTTP client's native helpers built for this host's Python, then the offered load 1 and 2
#    client processes can follow (bench_client_procs.py) and one process's exact-timing scenario and
#    zero-delay ceiling (bench_client.py) on this host's cores.
# Results: $OUT/fidelity.tgz, $OUT/client_procs.json, $OUT/client.json, $OUT/client-logs.tgz.
# Needs VLLM_GPU_PAYLOAD=DIR (the offline vLLM payload, see device.sh) on a fresh machine and
# OUT=DIR, where the results are written.
set -uo pipefail
cd "$(dirname "$0")/../.."
DEADLINE=${DEADLINE:-300}
bash benchmarks/gpu/device.sh true || exit 2
bash benchmarks/gpu/device.sh python3 benchmarks/gpu/validate.py --work /tmp/fid --pack $OUT/fidelity.tgz \
    --deadline-s ${FIDELITY_S:-170} --phases env,inproc-burst,offline,report --burst-repeats 1 > /tmp/fid.log 2>&1
echo "FIDELITY rc=$? at ${SECONDS}s" | tee -a /tmp/fid.log
grep -E "VALIDATE|vs LLM|ratio" /tmp/fid.log | tail -8
bash benchmarks/gpu/device.sh python3 -m backends.http.native_build --dest /tmp/site > /tmp/native.log 2>&1
echo "NATIVE rc=$?: $(tail -1 /tmp/native.log)"
LEFT=$((DEADLINE - SECONDS - 50))
[ $LEFT -gt 30 ] && timeout -k 5 $LEFT bash benchmarks/gpu/device.sh python3 benchmarks/bench_client_procs.py --procs 1,2 \
    --streams ${STREAMS:-2000,4000,8000} --json $OUT/client_procs.json > /tmp/procs.log 2>&1
echo "PROCS rc=$? at ${SECONDS}s" | tee -a /tmp/procs.log
tail -12 /tmp/procs.log
LEFT=$((DEADLINE - SECONDS - 5))
[ $LEFT -gt 15 ] && timeout -k 5 $LEFT bash benchmarks/gpu/device.sh python3 benchmarks/bench_client.py --scenario \
    --streams 512 --ttft-ms 50 --itl-ms 10 --tokens 96 --ceiling 512 --json $OUT/client.json > /tmp/client.log 2>&1
echo "CLIENT rc=$? at ${SECONDS}s" | tee -a /tmp/client.log
tail -8 /tmp/client.log
tar czf $OUT/client-logs.tgz -C /tmp fid.log native.log procs.log client.log 2>/dev/null
ls -la $OUT
