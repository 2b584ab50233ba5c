#!/bin/bash
# Quantization quality on trained weights, multi-turn prefix caching, and llama.cpp at its best, on
# one GPU machine (docs/benchmarks.md "Quantization quality on trained weights (H200)", "Multi-turn
# prefix caching (H200)", "llama.cpp at its default and at its best (H200)"). Phases, in calls that
# follow each other on one warm machine (everything under /tmp stays between them; background jobs
# are started with setsid so they outlive the call that starts them):
#   start     copies the carried inputs to /tmp; in the background: the llama.cpp CUDA build
#             (llama-server, llama-quantize, llama-perplexity; the product's CMake flags) and the
#             Qwen2.5-7B-layout bf16 checkpoint (materialize.py) with its BF16 GGUF (the llamacpp
#             backend's own preparation); in the foreground: the trained model
#             (`python -m backends.models.train --shape small --corpus python --device cuda`), then
#             its W8A8-int8 and W4A16 checkpoints (materialize.py's round-to-nearest writers, bit for
#             bit llmcompressor's data-free presets)
#   quality   `compare quant quality` on the trained model: transformers float32 reference, vLLM
#             fp32 / bf16 / FP8 (online) / W8A8-int8 / W4A16
#   sessions  `compare run --workload benchmarks/gpu/sessions.workload.yaml --vary
#             prefix_caching=true,false` on vLLM (the 7B layout, random weights)
#   llama     llamacpp_quality.py (F32 / BF16 / Q8_0 / Q4_K_M by llama-perplexity), then llama.cpp
#             bf16 on the 7B checkpoint at c1/c16/c64 in each configuration of LLAMA_CONFIGS
# Needs OUT=DIR; CARRY=DIR holding (for `start`) llama-src.tar.xz (llama.cpp b11434's source tree,
# one top directory), tok7b.tar.xz (a tokenizer directory), lite/*.whl (pydantic, pydantic-core,
# annotated-types, typing-inspection, msgspec for cp312), payA/ (SHA256SUMS + part00 of the vLLM
# payload, see device.sh) and (for `quality`) payB/part01. PHASES=start | quality,sessions | llama.
# Every phase stays inside DEADLINE (default 570 s) and packs what it has into $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
REPO=$(pwd)
DEADLINE=${DEADLINE:-570}
PHASES=${PHASES:-start}
CARRY=${CARRY:-.gpu}
W=/tmp/r3
SM=/tmp/small            # the trained model
CK=/tmp/ck               # the 7B-layout bf16 checkpoint
LL=/tmp/llama            # llama.cpp source and build
export LLM_COMPARE_CACHE=/tmp/llmc
mkdir -p $W/runs $W/logs
say() { echo "R3 [$SECONDS s] $*" | tee -a $W/phases.log; }
left() { echo $((DEADLINE - SECONDS)); }
pack() {
    cp $W/phases.log $OUT/ 2>/dev/null
    tar czf $OUT/r3.tgz.tmp -C $W --exclude='*.kld' --exclude='heldout.txt' . 2>/dev/null && mv $OUT/r3.tgz.tmp $OUT/r3.tgz
}
trap 'pack' EXIT
say "phases $PHASES; $(nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader); disk $(df -h /tmp | tail -1 | awk '{print $4" free"}')"
mkdir -p /tmp/carry && cp -r $CARRY/. /tmp/carry/ 2>/dev/null

pypath() {  # the vLLM payload's site-packages once extracted, else the project's own small needs
    if [ -f /tmp/site/.extracted_ok ]; then echo "/tmp/site:$REPO"
    else
        [ -f /tmp/site-lite/.ok ] || { python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-lite /tmp/carry/lite/*.whl && touch /tmp/site-lite/.ok; }
        echo "/tmp/site-lite:$REPO"
    fi
}
export PYTHONPATH=$(pypath)

case ",$PHASES," in *,start,*)
    say "python $(python3 --version 2>&1), torch $(python3 -c 'import torch; print(torch.__version__)'), cores $(nproc)"
    mkdir -p $LL/src && tar xJf /tmp/carry/llama-src.tar.xz -C $LL/src --strip-components=1 || exit 2
    # the converter of the same source where the product's GGUF preparation looks for it (no sdist here)
    SRCDIR=$(python3 -c 'from backends.models.engine_cache import EngineCache; from backends.llamacpp.build import SOURCE_BUILD, SDIST_SHA256; print(EngineCache().root / ".src" / f"llama.cpp-{SOURCE_BUILD}-{SDIST_SHA256[:12]}")')
    mkdir -p "$SRCDIR" && cp -r $LL/src/convert_hf_to_gguf.py $LL/src/conversion $LL/src/gguf-py $LL/src/LICENSE "$SRCDIR"/
    FLAGS=$(python3 -c 'from backends.llamacpp.build import cmake_flags; print(" ".join(cmake_flags("90")))')
    say "llama.cpp build (background): $FLAGS"
    setsid nohup bash -c "cd $LL/src && cmake -S . -B build $FLAGS > $W/logs/llama-build.log 2>&1 && \
        cmake --build build -j 12 --target llama-server llama-quantize llama-perplexity >> $W/logs/llama-build.log 2>&1; \
        echo \"exit \$?\" > $W/llama-build.done" > /dev/null 2>&1 &
    mkdir -p /tmp/tok7b && tar xJf /tmp/carry/tok7b.tar.xz -C /tmp/tok7b --strip-components=1
    say "7B checkpoint + BF16 GGUF (background)"
    setsid nohup bash -c "python3 benchmarks/gpu/materialize.py --config benchmarks/gpu/qwen2.5-7b-config.json \
        --tokenizer /tmp/tok7b --out $CK > $W/logs/materialize.log 2>&1 && python3 -c \"
from backends.llamacpp.gguf import prepare_gguf
e, hit = prepare_gguf('$CK', 'bf16'); print(e.path, hit)\" > $W/logs/gguf-7b-bf16.log 2>&1; echo \"exit \$?\" > $W/prep7b.done" > /dev/null 2>&1 &
    say "training the small model (foreground)"
    python3 -m backends.models.train $SM --shape small --corpus python --corpus-bytes 120000000 --steps 2400 \
        --batch 32 --seq-len 512 --lr 0.001 --warmup 100 --device cuda --max-seconds 200 --threads 8 \
        --eval-windows 64 --eval-len 512 > $W/logs/train.log 2>&1
    say "train rc=$? $(tail -1 $W/logs/train.log)"
    python3 -c "import json; p=json.load(open('$SM/llm_compare_tiny.json')); p['corpus'].pop('heldout_paths', None); print(json.dumps(p, indent=1))" > $W/trained-provenance.json 2>&1
    cat $W/trained-provenance.json | grep -E '"(parameters|steps_run|seconds|tokens_seen|initial_loss|final_train_loss|perplexity|train_tokens)"' | tr -s ' ' | tr '\n' ' '; echo
    python3 -c "
from pathlib import Path
from benchmarks.gpu.materialize import to_w8a8_int8, to_w4a16
print(to_w8a8_int8(Path('$SM'), Path('$SM-w8a8-int8')))
print(to_w4a16(Path('$SM'), Path('$SM-w4a16')))" > $W/logs/small-quant.log 2>&1
    say "small-model checkpoints rc=$? $(tail -2 $W/logs/small-quant.log | tr '\n' ' ')"
    while [ $(left) -gt 40 ] && { [ ! -f $W/llama-build.done ] || [ ! -f $W/prep7b.done ]; }; do sleep 10; done
    say "llama build: $(cat $W/llama-build.done 2>/dev/null || echo running; tail -1 $W/logs/llama-build.log)"
    say "7B prep: $(cat $W/prep7b.done 2>/dev/null || echo running); $(tail -1 $W/logs/materialize.log 2>/dev/null | cut -c1-200)"
    ls -la $LL/src/build/bin/ 2>/dev/null | grep llama- | tee -a $W/phases.log
;; esac

case ",$PHASES," in *,quality,*|*,sessions,*)
    if [ ! -f /tmp/site/.extracted_ok ]; then
        mkdir -p /tmp/payload && cp /tmp/carry/payA/* /tmp/carry/payB/* /tmp/payload/ 2>/dev/null
        VLLM_GPU_PAYLOAD=/tmp/payload bash benchmarks/gpu/device.sh true || { say "payload failed"; exit 2; }
    fi
    export PYTHONPATH=$(pypath)
;; esac

case ",$PHASES," in *,quality,*)
    say "compare quant quality on the trained model"
    timeout -k 15 $(( $(left) < 330 ? $(left) : 330 )) bash benchmarks/gpu/device.sh python3 -m compare.cli quant quality \
        --model $SM --vllm-schemes fp32,bf16,w8a8-fp8,w8a8-int8,w4a16 --openvino-schemes '' \
        --checkpoint w8a8-int8=$SM-w8a8-int8 --checkpoint w4a16=$SM-w4a16 --windows 32 --window-len 512 \
        --out $W/quality-vllm.json > $W/logs/quality-vllm.log 2>&1
    say "quality rc=$?"
    grep -v -E "^(INFO|DEBUG|WARNING|\(EngineCore)" $W/logs/quality-vllm.log | tail -22
    pack
;; esac

case ",$PHASES," in *,sessions,*)
    mkdir -p /tmp/m7 && cp benchmarks/gpu/qwen2.5-7b-config.json /tmp/m7/config.json
    say "sessions: vLLM prefix caching on/off"
    timeout -k 15 $(( $(left) - 10 )) bash benchmarks/gpu/device.sh python3 -m compare.cli run --backends vllm \
        --model /tmp/m7 --spec benchmarks/gpu/h200.spec.yaml --workload benchmarks/gpu/sessions.workload.yaml \
        --vary prefix_caching=true,false --concurrency 8,32 --warmup 2 --quality off \
        --out $W/runs --run-id sessions-vllm > $W/logs/sessions-vllm.log 2>&1
    say "sessions rc=$?"
    grep -v -E "^(INFO|DEBUG|WARNING|\(EngineCore)" $W/logs/sessions-vllm.log | tail -45
    pack
;; esac

case ",$PHASES," in *,llama,*)
    export LLM_COMPARE_LLAMA_SERVER=$LL/src/build/bin/llama-server
    say "llama.cpp quality (llama-perplexity)"
    timeout -k 10 150 python3 benchmarks/gpu/llamacpp_quality.py --model $SM --bin $LL/src/build/bin \
        --ctx 512 --chunks 32 --out $W/quality-llamacpp.json > $W/logs/quality-llamacpp.log 2>&1
    say "llama quality rc=$?"; tail -30 $W/logs/quality-llamacpp.log
    pack
    # name:flags (comma-separated --native values); the default is the backend's own plan
    CONFIGS=${LLAMA_CONFIGS:-"default: backend-sampling:--backend-sampling=true top-k1:--top-k=1,--samplers=top_k"}
    for cfg in $CONFIGS; do
        name=${cfg%%:*}; flags=${cfg#*:}; nat=()
        for f in ${flags//,/ }; do nat+=(--native "llamacpp.$f"); done
        t=$(( $(left) < 170 ? $(left) : 170 ))
        [ "$t" -gt 60 ] || { say "llama $name: skipped, ${t}s left"; continue; }
        say "llama.cpp $name (${nat[*]:-})"
        timeout -k 15 $t bash benchmarks/gpu/device.sh python3 -m compare.cli run --backends llamacpp --model $CK \
            --dtype bfloat16 --max-model-len 512 --max-num-seqs 64 --prefix-caching false --seed 0 \
            --input-len 256 --output-len 64 --num-requests 128 --concurrency 1,16,64 --requests-per-stream 2 \
            --warmup 4 --quality off "${nat[@]}" --out $W/runs --run-id llama-$name > $W/logs/llama-$name.log 2>&1
        say "llama $name rc=$?"
        grep -E "^ *(A|B) +c[0-9]|CPU-bound|busy|tok/s" $W/logs/llama-$name.log | head -12
        pack
    done
;; esac
say "done"
