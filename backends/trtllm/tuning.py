"""The LLM API options `compare tune` searches for TensorRT-LLM and the rules they must satisfy."""
from __future__ import annotations

from adapters.spec import ServingSpec
from adapters.tuning import Config, Knob, Space


def _rules(cfg: Config, spec: ServingSpec, gpu: bool) -> str | None:
    bs, nt = cfg.get("max_batch_size"), cfg.get("max_num_tokens")
    if bs is not None and nt is not None and nt < bs:
        return f"max_num_tokens={nt} < max_batch_size={bs}: a full decode batch would not fit"
    return None


SPACE = Space("trtllm", (
    Knob("max_batch_size", (64, 256, 1024), int, native="max_batch_size"),
    Knob("max_num_tokens", (2048, 8192), int, native="max_num_tokens"),
    Knob("kv_free_fraction", (0.85, 0.9, 0.95), float,
         native="kv_cache_config.free_gpu_memory_fraction", gpu_only=True),
    Knob("enable_block_reuse", (True, False), bool, native="kv_cache_config.enable_block_reuse"),
), _rules)
