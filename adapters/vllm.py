"""ServingSpec -> vLLM engine arguments (``AsyncEngineArgs`` kwargs and server CLI flags).

The same dict feeds the in-process backend and the OpenAI server backend, so both run the
identical engine configuration.
"""
from __future__ import annotations

from typing import Any

from adapters.quant import vllm_quant_args
from adapters.spec import ServingSpec

# spec field -> vLLM engine-arg name, for fields that map one to one
_DIRECT = {
    "tokenizer": "tokenizer",
    "max_model_len": "max_model_len",
    "max_num_seqs": "max_num_seqs",
    "max_num_batched_tokens": "max_num_batched_tokens",
    "block_size": "block_size",
    "chunked_prefill": "enable_chunked_prefill",
    "prefix_caching": "enable_prefix_caching",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "kv_cache_memory_bytes": "kv_cache_memory_bytes",
    "enforce_eager": "enforce_eager",
}


def vllm_engine_args(spec: ServingSpec, device: str | None = None) -> dict[str, Any]:
    """Keyword arguments for ``vllm.engine.arg_utils.AsyncEngineArgs``.

    ``device`` ("cuda"/"cpu", default: detected) decides the online FP8 flavour and which schemes
    have a kernel (adapters/quant.py); bad combinations raise UnsupportedSpecError here.
    """
    args: dict[str, Any] = {"model": spec.model, "seed": spec.seed}
    if spec.dtype != "auto":
        args["dtype"] = spec.dtype
    # quantization= (online), or a config-only model copy for dummy weights; checks the checkpoint
    args.update(vllm_quant_args(spec, device))
    for field, name in _DIRECT.items():
        value = getattr(spec, field)
        if value is not None:
            args[name] = value
    if spec.tensor_parallel != 1:
        args["tensor_parallel_size"] = spec.tensor_parallel
    if spec.kv_cache_dtype != "auto":
        args["kv_cache_dtype"] = spec.kv_cache_dtype
    if spec.load_format != "auto":
        args["load_format"] = spec.load_format
    args.update(spec.native_for("vllm"))
    return args


def vllm_server_argv(spec: ServingSpec, host: str, port: int) -> list[str]:
    """``vllm serve``-style CLI flags for the same engine config (OpenAI API server)."""
    args = vllm_engine_args(spec)
    argv = ["--model", str(args.pop("model")), "--host", host, "--port", str(port)]
    for key, value in args.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            # vLLM's argparse takes --flag / --no-flag for booleans
            argv.append(flag if value else "--no-" + key.replace("_", "-"))
        elif isinstance(value, (dict, list)):
            import json

            argv += [flag, json.dumps(value)]
        else:
            argv += [flag, str(value)]
    return argv
