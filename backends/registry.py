"""Every backend by name: how to build it, its pure plan (adapter) and what it needs to run.

Backend modules are imported only when a backend is built, so ``compare plan`` and
``compare backends`` work without any framework installed.

A backend name may carry a target after ``@``: ``openai@http://127.0.0.1:8000``.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable

from adapters.spec import ServingSpec
from backends.base import Backend
from core.errors import UserError
from core.lazy import importable


@dataclass(frozen=True)
class BackendEntry:
    name: str
    summary: str
    factory: str  # "module:Class"; called as Class(spec, name=..., target=... if any)
    plan: str  # "module:function" (pure): spec [, target] -> native config dict
    requires: tuple[str, ...] = ()  # Python modules needed to run it here
    extra: str = ""  # pip extra / hint that provides them
    needs_target: bool = False  # name@TARGET required
    notes: tuple[str, ...] = ()
    check: str | None = None  # optional "module:function" -> (ok, reason) for runtime checks
    capabilities: dict[str, Any] = field(default_factory=dict)


_ENTRIES: dict[str, BackendEntry] = {}


def register(entry: BackendEntry) -> None:
    _ENTRIES[entry.name] = entry


def entries() -> list[BackendEntry]:
    _load_plugins()
    return list(_ENTRIES.values())


class UnknownBackendError(UserError, ValueError):
    pass


def split_name(full: str) -> tuple[str, str | None]:
    base, _, target = full.partition("@")
    return base.strip(), (target.strip() or None)


def entry_for(full: str) -> tuple[BackendEntry, str | None]:
    _load_plugins()
    base, target = split_name(full)
    if base not in _ENTRIES:
        raise UnknownBackendError(
            f"unknown backend {base!r}; known: {', '.join(sorted(_ENTRIES))} (see `compare backends`)")
    e = _ENTRIES[base]
    if e.needs_target and not target:
        raise UnknownBackendError(f"backend {base!r} needs a target: {base}@URL")
    return e, target


def _load(ref: str) -> Callable[..., Any]:
    mod, _, attr = ref.partition(":")
    return getattr(importlib.import_module(mod), attr)


def plan(full: str, spec: ServingSpec) -> dict[str, Any]:
    e, target = entry_for(full)
    fn = _load(e.plan)
    return fn(spec, target) if e.needs_target or target else fn(spec)


def build(full: str, spec: ServingSpec, **kw: Any) -> Backend:
    e, target = entry_for(full)
    cls = _load(e.factory)
    if target is not None:
        kw["target"] = target
    return cls(spec, name=full, **kw)


def availability(e: BackendEntry) -> tuple[bool, str]:
    missing = [m for m in e.requires if not importable(m)]
    if missing:
        return False, f"missing Python package(s) {', '.join(missing)}: {e.extra}"
    if e.check:
        return _load(e.check)()
    return True, "ready"


# ---------------------------------------------------------------- built-in backends

def _vllm_plan(spec: ServingSpec) -> dict[str, Any]:
    from adapters.vllm import vllm_engine_args

    return {"engine": "vllm.v1.engine.async_llm.AsyncLLM", "engine_args": vllm_engine_args(spec)}


def _hf_plan(spec: ServingSpec) -> dict[str, Any]:
    from adapters.hf import hf_model_kwargs

    return hf_model_kwargs(spec)


# Modules that register more backends when imported (one per framework/transport). A module
# that does not exist (yet) is skipped; any other import error is a bug and propagates.
PLUGINS = (
    "backends.http_backends",   # openai@URL, tgi@URL endpoints and the vllm-server backend
    "backends.tgi",             # TGI via its container
    "backends.vllm_container",  # vLLM OpenAI server in a container
    "backends.trtllm",          # TensorRT-LLM (container flows and in-process)
    "backends.topology",        # replicas behind a client-side load balancer
)
_plugins_loaded = False


def _load_plugins() -> None:
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for mod in PLUGINS:
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name != mod:
                raise


register(BackendEntry(
    name="vllm", summary="vLLM in-process (AsyncLLM, v1 engine), streaming DELTA outputs",
    factory="backends.vllm_inproc:VllmBackend", plan="backends.registry:_vllm_plan",
    requires=("vllm",), extra="pip install 'llm-compare[cpu]' (CPU) or 'llm-compare[vllm]' (GPU)",
    capabilities={"forced_output_length": True, "token_id_prompts": True, "logprobs": True,
                  "continuous_batching": True},
))
register(BackendEntry(
    name="hf", summary="transformers reference (model.generate, one request at a time); quality reference",
    factory="backends.hf:HFBackend", plan="backends.registry:_hf_plan",
    requires=("transformers", "torch"), extra="pip install 'llm-compare[hf]'",
    capabilities={"forced_output_length": True, "token_id_prompts": True, "logprobs": False,
                  "continuous_batching": False},
))
