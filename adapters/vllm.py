"""ServingSpec -> vLLM engine arguments (``AsyncEngineArgs`` kwargs and server CLI flags).

The same plan feeds the in-process backend, the OpenAI server backend and the container, so all
run the identical engine configuration. :func:`vllm_plan` is computed once per run (backends/
registry.py) from the spec and the probed :class:`~adapters.target.Target`.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping

from adapters.quant import DummyCopy, vllm_quant_args
from adapters.spec import ServingSpec, UnsupportedSpecError
from adapters.target import Target

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


@dataclass(frozen=True)
class VllmPlan:
    """The resolved engine arguments, and the config-only model copy they need (dummy weights):
    ``engine_args["model"]`` is the spec's model until the I/O layer has placed the copy
    (:meth:`with_model`)."""

    engine_args: Mapping[str, Any]
    dummy_copy: DummyCopy | None = None

    def with_model(self, model_dir: str) -> dict[str, Any]:
        """Engine args with ``model`` pointing at the placed dummy copy (same key order)."""
        return {k: (model_dir if k == "model" else v) for k, v in self.engine_args.items()}


def vllm_plan(spec: ServingSpec, target: Target | None = None) -> VllmPlan:
    """The engine plan. ``target`` (default: nothing probed, CPU) decides the online FP8 flavour,
    which schemes have a kernel and whether the checkpoint is what was asked for (adapters/quant.py);
    bad combinations raise UnsupportedSpecError here."""
    args: dict[str, Any] = {"model": spec.model, "seed": spec.seed}
    if target is not None and target.device == "cpu" and spec.block_size is not None and spec.block_size % 32:
        # vllm/v1/attention/backends/cpu_attn.py get_supported_kernel_block_sizes -> MultipleOf(32): the
        # engine would refuse it only after minutes of start-up
        raise UnsupportedSpecError("vllm", f"block_size={spec.block_size}", "vLLM's CPU attention kernel takes "
                                   "multiples of 32", alternative=f"block_size={-(-spec.block_size // 32) * 32}")
    if spec.dtype != "auto":
        args["dtype"] = spec.dtype
    # quantization= (online), or a config-only model copy for dummy weights; checks the checkpoint
    quant, copy = vllm_quant_args(spec, target)
    args.update(quant)
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
    return VllmPlan(MappingProxyType(args), copy)


def vllm_engine_args(spec: ServingSpec, target: Target | None = None) -> dict[str, Any]:
    """Keyword arguments for ``vllm.engine.arg_utils.AsyncEngineArgs`` (a dummy-weight run's
    model copy is not placed here: see :class:`VllmPlan`)."""
    return dict(vllm_plan(spec, target).engine_args)


def server_argv(engine_args: Mapping[str, Any], host: str, port: int) -> list[str]:
    """``vllm serve``-style CLI flags for engine args (OpenAI API server)."""
    args = dict(engine_args)
    argv = ["--model", str(args.pop("model")), "--host", host, "--port", str(port)]
    for key, value in args.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            # vLLM's argparse takes --flag / --no-flag for booleans
            argv.append(flag if value else "--no-" + key.replace("_", "-"))
        elif isinstance(value, (dict, list)):
            argv += [flag, json.dumps(value)]
        else:
            argv += [flag, str(value)]
    return argv


def vllm_server_argv(spec: ServingSpec, host: str, port: int, target: Target | None = None) -> list[str]:
    """The server flags for the same engine config as :func:`vllm_engine_args`."""
    return server_argv(vllm_engine_args(spec, target), host, port)
