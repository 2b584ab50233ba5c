"""ServingSpec -> transformers reference configuration.

The transformers backend is a reference, not a serving engine: it runs one request at a time
with a plain KV cache. Engine scheduling/memory knobs have no meaning for it; they are recorded
as ``not_applicable`` (visible in ``compare plan`` and run.json), never silently dropped.
Options that would change the model's output (quantization, KV-cache dtype) raise.
"""
from __future__ import annotations

from typing import Any

from adapters.spec import ServingSpec, UnsupportedSpecError

_ENGINE_KNOBS = (
    "max_num_seqs", "max_num_batched_tokens", "block_size", "chunked_prefill", "prefix_caching",
    "gpu_memory_utilization", "kv_cache_memory_bytes", "enforce_eager",
)

_TORCH_DTYPE = {"auto": "auto", "float32": "float32", "float16": "float16", "bfloat16": "bfloat16"}


def hf_model_kwargs(spec: ServingSpec) -> dict[str, Any]:
    """Returns {"from_pretrained": kwargs, "max_model_len": int|None, "not_applicable": {...}}."""
    if spec.quantization != "none":
        raise UnsupportedSpecError(
            "hf", f"quantization={spec.quantization}",
            "the transformers reference runs the unquantized checkpoint (it is the quality reference)",
            alternative="quantization=none",
        )
    if spec.kv_cache_dtype != "auto":
        raise UnsupportedSpecError("hf", f"kv_cache_dtype={spec.kv_cache_dtype}",
                                   "the reference keeps the KV cache in the model dtype",
                                   alternative="kv_cache_dtype=auto")
    if spec.tensor_parallel != 1:
        raise UnsupportedSpecError("hf", f"tensor_parallel={spec.tensor_parallel}",
                                   "the reference runs on one device", alternative="tensor_parallel=1")
    if spec.load_format == "dummy":
        raise UnsupportedSpecError("hf", "load_format=dummy",
                                   "the reference needs real weights", alternative="load_format=auto")
    kwargs: dict[str, Any] = {"dtype": _TORCH_DTYPE[spec.dtype]}
    kwargs.update(spec.native_for("hf"))
    not_applicable = {
        k: getattr(spec, k) for k in _ENGINE_KNOBS if getattr(spec, k) is not None
    }
    return {
        "model": spec.model,
        "tokenizer": spec.tokenizer or spec.model,
        "from_pretrained": kwargs,
        "max_model_len": spec.max_model_len,
        "seed": spec.seed,
        "batching": "one request at a time (no continuous batching)",
        "not_applicable": not_applicable,
    }
