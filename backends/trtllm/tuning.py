"""The LLM API options `compare tune` searches for TensorRT-LLM and the rules they must satisfy.

Knobs carry TRT-LLM's names but set the ServingSpec fields the plan maps onto those LlmArgs
(adapters/trtllm.py), so a trial's spec goes through the same checks and the same single place for
KV settings as any run; a native dotted key would be refused by the plan as an unknown option."""
from __future__ import annotations

from adapters.spec import ServingSpec
from adapters.tuning import Config, Knob, Space


def _rules(cfg: Config, spec: ServingSpec, gpu: bool) -> str | None:
    bs, nt = cfg.get("max_batch_size"), cfg.get("max_num_tokens")
    if bs is not None and nt is not None and nt < bs:
        return f"max_num_tokens={nt} < max_batch_size={bs}: a full decode batch would not fit"
    return None


SPACE = Space("trtllm", (
    Knob("max_batch_size", (64, 256, 1024), int, field="max_num_seqs", help="LlmArgs max_batch_size"),
    Knob("max_num_tokens", (2048, 8192), int, field="max_num_batched_tokens", help="LlmArgs max_num_tokens"),
    Knob("kv_free_fraction", (0.85, 0.9, 0.95), float, field="gpu_memory_utilization", gpu_only=True,
         help="kv_cache_config.free_gpu_memory_fraction"),
    Knob("enable_block_reuse", (True, False), bool, field="prefix_caching", help="kv_cache_config.enable_block_reuse"),
), _rules)
