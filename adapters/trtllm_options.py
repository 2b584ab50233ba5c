"""`compare plan --backends trtllm`: per spec option, what TensorRT-LLM does with it.

Each option the spec sets is reported as ``mapped`` (the upstream name it became and where it is
emitted), ``not_applicable`` (upstream has no such setting, with the reason) or ``default`` (left
unset, so upstream's default applies). Options upstream cannot honour never reach this table: the
plan refuses them first (exit 2, with the reason and an alternative).
"""
from __future__ import annotations

from typing import Any

from adapters.spec import ServingSpec

# spec option -> (LlmArgs path, trtllm-serve flag, trtllm-build flag, caveat)
_TARGETS: dict[str, tuple[str | None, str | None, str | None, str | None]] = {
    "dtype": ("dtype", None, "quantize.py --dtype", None),
    "max_model_len": ("max_seq_len", None, "--max_seq_len", None),
    "max_num_seqs": ("max_batch_size", "--max_batch_size", "--max_batch_size", None),
    "max_num_batched_tokens": ("max_num_tokens", "--max_num_tokens", "--max_num_tokens", None),
    "block_size": ("kv_cache_config.tokens_per_block", None, "--tokens_per_block", None),
    "chunked_prefill": ("enable_chunked_prefill", None, "--use_paged_context_fmha", None),
    "prefix_caching": ("kv_cache_config.enable_block_reuse", None, "--use_paged_context_fmha", None),
    "gpu_memory_utilization": ("kv_cache_config.free_gpu_memory_fraction", None, None,
                               "a fraction of the memory FREE after weights and buffers, not of total memory"),
    "kv_cache_memory_bytes": ("kv_cache_config.max_gpu_total_bytes", None, None, None),
    "tensor_parallel": ("tensor_parallel_size", "--tp_size", "--workers", None),
    "kv_cache_dtype": ("kv_cache_config.dtype", None, "quantize.py --kv_cache_dtype", None),
    "enforce_eager": ("cuda_graph_config", None, None, "null: no CUDA graphs"),
    "load_format": ("load_format", None, None, None),
    "quantization": (None, None, None, "a quantize step (quantize.py / ModelOpt hf_ptq.py) before serving"),
}
_DEFAULTS = {"dtype": "auto", "quantization": "none", "tensor_parallel": 1, "kv_cache_dtype": "auto",
             "load_format": "auto", "seed": 0}


def _in_yaml(llm_args: dict[str, Any], path: str) -> bool:
    node: Any = llm_args
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def spec_option_table(spec: ServingSpec, flow: str, llm_args: dict[str, Any], serve_argv: tuple[str, ...],
                      not_applicable: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in list(_TARGETS) + ["seed"]:
        value = getattr(spec, name)
        if name in not_applicable:
            why = ("TensorRT-LLM seeds per request (SamplingParams.seed), not per server" if name == "seed"
                   else "a TensorRT engine has no eager mode")
            out[name] = {"value": value, "status": "not_applicable", "how": why}
            continue
        if value is None or value == _DEFAULTS.get(name):
            continue
        yaml_key, serve_flag, build_flag, caveat = _TARGETS[name]
        where: list[str] = []
        if yaml_key and _in_yaml(llm_args, yaml_key):
            where.append(f"LlmArgs YAML {yaml_key}")
        if serve_flag and serve_flag in serve_argv:
            where.append(f"trtllm-serve {serve_flag}")
        if flow == "engine" and build_flag:
            where.append(f"trtllm-build {build_flag}" if build_flag.startswith("--") else build_flag)
        if name == "quantization":
            where.append("quantize step")
        row: dict[str, Any] = {"value": value, "status": "mapped" if where else "default",
                               "how": "; ".join(where) or "the release's default"}
        if caveat:
            row["meaning"] = caveat
        out[name] = row
    return out
