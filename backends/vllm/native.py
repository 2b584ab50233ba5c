"""vLLM's side of ``--native vllm.KEY=VALUE``: engine arguments are passed through as they are, so
an unknown key is checked here against the installed vLLM's engine-argument fields (else it would
fail only when the engine starts, as a TypeError); and the CPU default the engine needs."""
from __future__ import annotations

import importlib.util
from typing import Any

from adapters.spec import ServingSpec

LABEL = "a vLLM engine argument"
CPU_KV_CACHE_BYTES = 2**30


def known_keys(model: str) -> set[str] | None:
    """The installed vLLM's engine-argument fields; None when vLLM is not installed here."""
    if importlib.util.find_spec("vllm") is None:
        return None
    import dataclasses
    import os
    import sys

    sys.stderr.flush()
    saved = os.dup(2)
    try:  # vLLM's import-time notes (platform, Triton) are not this command's output
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        from vllm.engine.arg_utils import AsyncEngineArgs
    except Exception:  # a broken vLLM install: its backend reports it at start
        return None
    finally:
        os.dup2(saved, 2)
        os.close(saved)
    return {f.name for f in dataclasses.fields(AsyncEngineArgs)}



def native_defaults(spec: ServingSpec, gpu: bool) -> dict[str, Any]:
    """vLLM on CPU refuses to start without an explicit KV-cache size: 1 GiB unless the spec sizes
    the cache itself (given as a native vLLM option, so other frameworks keep their defaults)."""
    if gpu or spec.kv_cache_memory_bytes is not None or spec.gpu_memory_utilization is not None:
        return {}
    return {"kv_cache_memory_bytes": CPU_KV_CACHE_BYTES}


def checked_keys(model: str) -> tuple[str, set[str] | None]:
    """(what a key of this section is, the keys the installed framework takes or None)."""
    return LABEL, known_keys(model)
