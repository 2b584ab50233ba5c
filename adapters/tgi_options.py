"""`compare plan --backends tgi`: per spec option, what TGI 3.3 does with it, with the upstream
file (adapters/facts/tgi-v3.3.7.json) that says so. Pure: the plan's explanation, not its argv."""
from __future__ import annotations

from typing import Any

from adapters.spec import ServingSpec
from adapters.tgi import FACTS, KV_BUDGET_WHY

# option -> (disposition, how, fact-sheet row that holds it)
OPTIONS: dict[str, tuple[str, str, str]] = {
    "model": ("honoured", "--model-id (the path inside the container)", "--model-id"),
    "tokenizer": ("refused", "TGI loads the tokenizer from --model-id", "--model-id"),
    "dtype": ("honoured", "--dtype float16|bfloat16 (auto: the checkpoint's; not with --quantize)", "--dtype"),
    "quantization": ("mapped", "--quantize METHOD (adapters/quant_matrix.py)", "--quantize"),
    "max_model_len": ("mapped", "--max-total-tokens N and --max-input-tokens N-1; TGI still admits a request "
                      "whose input + min(max_new_tokens, 1024) fits and ends it `length` when a continuation "
                      "no longer fits", "behaviour.requeue"),
    "max_num_seqs": ("honoured", "--max-batch-size", "--max-batch-size"),
    "max_num_batched_tokens": ("mapped", "--max-batch-prefill-tokens (must hold --max-input-tokens only when "
                               "TGI cannot chunk prefills)", "behaviour.prefill_vs_input"),
    "block_size": ("refused", "the attention backend fixes it (flashinfer 1, flashdecoding 256, paged 16)", "ATTENTION"),
    "chunked_prefill": ("mapped", "environment PREFILL_CHUNKING=1|0 (the server reads it; on by default, "
                        "off with speculation or paged attention)", "PREFILL_CHUNKING"),
    "prefix_caching": ("mapped", "environment PREFIX_CACHING=1|0 (the launcher and server read it; on by "
                       "default except VLM, seq2seq, LoRA, paged attention)", "PREFIX_CACHING"),
    "gpu_memory_utilization": ("honoured", "--cuda-memory-fraction (KV gets free memory x fraction x 0.90)",
                               "--cuda-memory-fraction"),
    "kv_cache_memory_bytes": ("refused", KV_BUDGET_WHY, "behaviour.kv_budget"),
    "tensor_parallel": ("honoured", "--num-shard", "--num-shard"),
    "kv_cache_dtype": ("mapped", "--kv-cache-dtype fp8_e4m3fn|fp8_e5m2", "--kv-cache-dtype"),
    "enforce_eager": ("mapped", "--cuda-graphs 0", "--cuda-graphs"),
    "seed": ("honoured", "sent per request as parameters.seed (0 included) when sampling", "behaviour.seed"),
    "load_format": ("refused", "dummy: TGI always loads real weights; auto/safetensors: its own loader",
                    "--model-id"),
}


def option_table(spec: ServingSpec) -> dict[str, dict[str, Any]]:
    """Every spec option with the value this spec gives it and TGI's handling of it."""
    out: dict[str, dict[str, Any]] = {}
    for name, (what, how, key) in OPTIONS.items():
        out[name] = {"value": getattr(spec, name), "status": what, "how": how, "upstream": FACTS.cite(key)}
    return out
