#!/bin/bash
# Quantized speed, verified, on one GPU (measured on an H200, docs/benchmarks.md "Quantized speed
# (H200)"): `compare quant run --dummy` once per scheme on the Qwen2.5-7B architecture with random
# weights in each scheme's layout (speed only), the same workload for every scheme; each cell's
# loaded method, kernel class and weight memory are read back from the engine and a cell that did
# not load what was asked is reported invalid. Needs the compressed-tensors and loguru wheels in
# .whl/ (W8A8-int8 is a compressed-tensors config). Results: $OUT/quant.tgz.
# Needs VLLM_GPU_PAYLOAD=DIR (the offline vLLM payload, see device.sh) on a fresh machine and
# OUT=DIR, where the results are written.
set -uo pipefail
cd "$(dirname "$0")/../.."
DEADLINE=${DEADLINE:-570}
SCHEMES=${SCHEMES:-bf16,w8a8-fp8,w8a8-int8,w4a16-awq,w4a16-gptq}
bash benchmarks/gpu/device.sh true || exit 2
mkdir -p /tmp/m7 && cp benchmarks/gpu/qwen2.5-7b-config.json /tmp/m7/config.json
pack() { tar czf $OUT/quant.tgz.tmp -C /tmp quant quant.log 2>/dev/null; mv $OUT/quant.tgz.tmp $OUT/quant.tgz; }
timeout -k 15 $((DEADLINE - 15)) bash benchmarks/gpu/device.sh python3 -m compare.cli quant run \
    --model /tmp/m7 --spec benchmarks/gpu/h200.spec.yaml --schemes "$SCHEMES" --dummy \
    --workload benchmarks/gpu/gate.workload.yaml --num-requests ${NUM_REQUESTS:-256} \
    --concurrency ${LEVELS:-64} --warmup 4 --timeout 300 --out /tmp/quant --run-id quant-h200 > /tmp/quant.log 2>&1
echo "QUANT rc=$? at ${SECONDS}s" | tee -a /tmp/quant.log
pack
grep -v -E "^(INFO|DEBUG|WARNING|\(EngineCore)" /tmp/quant.log | tail -30
ls -la $OUT
