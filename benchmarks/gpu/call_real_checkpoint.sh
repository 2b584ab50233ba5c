#!/bin/bash
# The default user path on a real checkpoint (measured on one H200, docs/benchmarks.md "Real
# checkpoints on the GPU"): the Qwen2.5-7B architecture with random weights written to disk as a
# user's checkpoint is (benchmarks/gpu/materialize.py: bf16 safetensors + the tokenizer, and an FP8
# copy of the same weights), then `compare run` exactly as a user types it -- quality on by default
# for bf16, scored by the float32 reference once the engine has stopped -- in phases:
#   vllm (in-process) bf16, vllm-server bf16, vllm on the FP8 checkpoint; c1 and c16.
# Every process's GPU memory is sampled by nvidia-smi every second beside the run's own per-level
# NVML record (run.json telemetry.gpu.processes).
# Needs: VLLM_GPU_PAYLOAD=DIR (the offline vLLM payload, see device.sh) on a fresh machine,
# TOKENIZER_TAR=FILE (a .tar.xz holding one directory of tokenizer files), OUT=DIR for the results;
# the FP8 phase also needs the compressed-tensors 0.17.0 and loguru wheels in .whl/ (vLLM imports them).
# PHASES=bf16,server,fp8 picks phases; DEADLINE (s) bounds the whole call.
set -uo pipefail
cd "$(dirname "$0")/../.."
DEADLINE=${DEADLINE:-585}
PHASES=${PHASES:-bf16,server,fp8}
W=/tmp/rc
mkdir -p $W
say() { echo "REALCK [$SECONDS s] $*" | tee -a $W/phases.log; }
left() { echo $((DEADLINE - SECONDS)); }
pack() { tar czf $OUT/realck.tgz.tmp -C /tmp rc 2>/dev/null && mv $OUT/realck.tgz.tmp $OUT/realck.tgz; }
nvidia-smi --query-compute-apps=timestamp,pid,process_name,used_memory --format=csv -l 1 > $W/nvidia-smi-apps.csv 2>&1 &
SMI=$!
trap 'kill $SMI 2>/dev/null; pack' EXIT
bash benchmarks/gpu/device.sh true || exit 2
say "payload ready"
mkdir -p /tmp/tok && tar xJf "$TOKENIZER_TAR" -C /tmp/tok --strip-components=1 || exit 2
timeout 150 bash benchmarks/gpu/device.sh python3 benchmarks/gpu/materialize.py \
    --config benchmarks/gpu/qwen2.5-7b-config.json --tokenizer /tmp/tok --out /tmp/ck \
    $(case ",$PHASES," in *,fp8,*) echo --fp8 /tmp/ck-fp8 ;; esac) \
    > $W/materialize.log 2>&1 || { say "materialize failed"; tail -20 $W/materialize.log; exit 1; }
say "checkpoints written: $(du -sh /tmp/ck* | tr '\n\t' '  ')"
cp /tmp/ck/materialize.json $W/

run() {  # name, budget (s), compare run arguments...
    local name=$1 budget=$2; shift 2
    local t=$(( $(left) < budget ? $(left) : budget ))
    [ "$t" -gt 60 ] || { say "$name: skipped, ${t}s left"; return; }
    say "$name: start (budget ${t}s)"
    timeout -k 15 $t bash benchmarks/gpu/device.sh python3 -m compare.cli run "$@" \
        --input-len 512 --output-len 128 --num-requests 32 --concurrency 1,16 --warmup 2 \
        --out $W --run-id $name > $W/$name.log 2>&1
    say "$name: rc=$?"
    grep -v -E "^(INFO|DEBUG|WARNING|\(APIServer|\(EngineCore)" $W/$name.log | tail -22
    pack
}
case ",$PHASES," in *,bf16,*) run vllm-bf16 230 --backends vllm --model /tmp/ck --dtype bfloat16 ;; esac
case ",$PHASES," in *,server,*) run vllm-server-bf16 200 --backends vllm-server --model /tmp/ck --dtype bfloat16 ;; esac
case ",$PHASES," in *,fp8,*) run vllm-fp8 170 --backends vllm --model /tmp/ck-fp8 --dtype bfloat16 --quantization w8a8-fp8 ;; esac
say "done"
