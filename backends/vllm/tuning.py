"""The knobs `compare tune` searches for vLLM (vllm, vllm-server, vllm-container: one engine config)
and the rules vLLM enforces on them at start-up (cited per rule)."""
from __future__ import annotations

from adapters.spec import ServingSpec
from adapters.tuning import Config, Knob, Space


def _vllm_rules(cfg: Config, spec: ServingSpec, gpu: bool) -> str | None:
    bs = cfg.get("block_size", spec.block_size)
    # vllm/v1/attention/backends/cpu_attn.py: get_supported_kernel_block_sizes -> MultipleOf(32);
    # the CUDA FlashAttention kernels take multiples of 16
    mult = 16 if gpu else 32
    if bs is not None and bs % mult:
        return f"block_size={bs} is not a multiple of {mult} (vLLM's {'GPU' if gpu else 'CPU'} attention kernel)"
    seqs = cfg.get("max_num_seqs", spec.max_num_seqs)
    tokens = cfg.get("max_num_batched_tokens", spec.max_num_batched_tokens)
    # vllm/config/scheduler.py verify_max_model_len
    if seqs is not None and tokens is not None and tokens < seqs:
        return f"max_num_batched_tokens={tokens} < max_num_seqs={seqs} (vLLM requires >=)"
    chunked = cfg.get("enable_chunked_prefill", spec.chunked_prefill)
    mml = cfg.get("max_model_len", spec.max_model_len)
    if chunked is False and tokens is not None and mml is not None and tokens < mml:
        return (f"max_num_batched_tokens={tokens} < max_model_len={mml} with chunked prefill off "
                f"(vLLM requires >=)")
    return None


SPACE = Space("vllm", (
    Knob("max_num_seqs", (4, 16, 64, 256), int, field="max_num_seqs",
         help="requests batched per engine step"),
    Knob("max_num_batched_tokens", (512, 2048, 8192), int, field="max_num_batched_tokens",
         help="token budget per engine step (prefill chunk size)"),
    Knob("enable_chunked_prefill", (True, False), bool, field="chunked_prefill"),
    Knob("enable_prefix_caching", (True, False), bool, field="prefix_caching"),
    Knob("block_size", (32, 64, 128), int, field="block_size", help="KV block size in tokens"),
    Knob("max_model_len", (), int, field="max_model_len",
         help="no default candidates: give them with --knob max_model_len=..."),
    Knob("gpu_memory_utilization", (0.80, 0.90, 0.95), float, field="gpu_memory_utilization",
         gpu_only=True),
), _vllm_rules)
