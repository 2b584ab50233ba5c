"""Shared by the GPU validation scripts: environment, spec/workload loading, engine facts."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

# Set before vLLM is imported (inherited by its engine-core processes and by the API server).
# Why each: flashinfer is not in the offline bundle (its sampler would be imported); no hub and no
# outbound route on the GPU machine; compile caches in /tmp so a second engine start is warm;
# NVLink multicast stays off (multi-GPU hosts shared with other tenants do not support it).
ENGINE_ENV = {
    "VLLM_USE_FLASHINFER_SAMPLER": "0",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "TVM_FFI_DISABLE_TORCH_C_DLPACK": "1",
    "VLLM_HOST_IP": "127.0.0.1",
    "VLLM_CACHE_ROOT": "/tmp/vllm_cache",
    "TRITON_CACHE_DIR": "/tmp/triton_cache",
    "TORCHINDUCTOR_CACHE_DIR": "/tmp/inductor_cache",
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
    "PYTHONUNBUFFERED": "1",
}


def set_engine_env() -> None:
    for k, v in ENGINE_ENV.items():
        os.environ.setdefault(k, v)


def load_spec(path: str | os.PathLike[str], model: str):
    from adapters.spec import ServingSpec

    data = yaml.safe_load(Path(path).read_text()) or {}
    data["model"] = str(model)
    return ServingSpec(**data)


def load_workload(path: str | os.PathLike[str], num_requests: int | None = None):
    from compare.workload.build import WorkloadSpec

    data = yaml.safe_load(Path(path).read_text()) or {}
    if num_requests is not None:
        data["num_requests"] = num_requests
    return WorkloadSpec(**data)


def engine_info(cfg: Any) -> dict[str, Any]:
    """What the engine resolved (KV blocks, compile/graph mode, attention backend)."""
    d: dict[str, Any] = {}
    try:
        cc = cfg.compilation_config
        d.update({
            "num_gpu_blocks": cfg.cache_config.num_gpu_blocks,
            "block_size": cfg.cache_config.block_size,
            "max_num_seqs": cfg.scheduler_config.max_num_seqs,
            "max_num_batched_tokens": cfg.scheduler_config.max_num_batched_tokens,
            "compilation_mode": str(getattr(cc, "mode", getattr(cc, "level", ""))),
            "cudagraph_mode": str(getattr(cc, "cudagraph_mode", "")),
            "attention_backend": str(getattr(getattr(cfg, "attention_config", None), "backend", "")),
            "use_v2_model_runner": getattr(cfg, "use_v2_model_runner", None),
        })
    except Exception as e:  # noqa: BLE001 - config layout differs across vLLM versions
        d["error"] = repr(e)
    return d
