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
    """The installed vLLM's engine-argument fields; None when vLLM is not installed here. Read from
    its source (20 ms) rather than by importing it (~10 s of torch and platform probing); the
    import is the fallback where the source is not laid out as expected."""
    spec = importlib.util.find_spec("vllm")
    if spec is None:
        return None
    return _keys_from_source(spec) or _keys_from_import()


def _keys_from_source(spec: Any) -> set[str] | None:
    """The annotated fields of ``AsyncEngineArgs`` and the classes of the same file it derives from
    (dataclass fields: ClassVar annotations are not fields)."""
    import ast
    from pathlib import Path

    try:
        src = Path(list(spec.submodule_search_locations)[0], "engine", "arg_utils.py").read_text()
        classes = {n.name: n for n in ast.parse(src).body if isinstance(n, ast.ClassDef)}
    except (OSError, SyntaxError, TypeError, IndexError, ValueError):
        return None

    def fields(name: str, seen: frozenset[str] = frozenset()) -> set[str]:
        out: set[str] = set()
        for base in classes[name].bases:
            if isinstance(base, ast.Name) and base.id in classes and base.id not in seen:
                out |= fields(base.id, seen | {name})
        for st in classes[name].body:
            if (isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)
                    and "ClassVar" not in ast.unparse(st.annotation)):
                out.add(st.target.id)
        return out

    if "AsyncEngineArgs" not in classes:
        return None
    return fields("AsyncEngineArgs") or None


def _keys_from_import() -> set[str] | None:
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


def checked_keys(model: str, options: dict[str, Any]) -> tuple[str, set[str] | None]:
    """(what a key of this section is, the keys the installed framework takes or None)."""
    return LABEL, known_keys(model)
