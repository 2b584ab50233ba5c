"""``--native BACKEND.KEY=VALUE`` checked against what the engine takes, before anything starts.

The adapters of OpenVINO, TGI, TensorRT-LLM and hf_cb refuse unknown native keys themselves. vLLM's
and transformers' native options are passed through as they are (engine arguments, and
``from_pretrained`` keywords or config attributes), so an unknown key would only fail when the engine
starts (vLLM: a TypeError; transformers: the model's ``__init__``). Here they are checked against
the installed framework: vLLM's engine-argument fields; transformers' loading keywords and the
model's config attributes. A framework that is not installed is not checked (its backend says so).
"""
from __future__ import annotations

import difflib
import importlib.util
import inspect
import re
from pathlib import Path
from typing import Any

from core.errors import UserError


def _nearest(key: str, known: set[str]) -> str:
    near = difflib.get_close_matches(key, sorted(known), n=3)
    return f" (nearest: {', '.join(near)})" if near else ""


def _vllm_keys() -> set[str] | None:
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


def _hf_keys(model: str) -> set[str] | None:
    """``from_pretrained``'s own keywords (its signature and the ones it pops from kwargs) and the
    model's config attributes; None when either cannot be known here."""
    if importlib.util.find_spec("transformers") is None or not (Path(model) / "config.json").is_file():
        return None
    try:
        from transformers import AutoConfig, PreTrainedModel

        fn = PreTrainedModel.from_pretrained
        keys = set(inspect.signature(fn).parameters) - {"kwargs", "model_args", "pretrained_model_name_or_path"}
        popped = set(re.findall(r"kwargs\.pop\(\s*[\"'](\w+)[\"']", inspect.getsource(fn)))
        config = AutoConfig.from_pretrained(model)
    except Exception:  # transformers' layout changed, or the config does not load: not checked here
        return None
    if not popped:
        return None
    return keys | popped | set(config.to_dict())


def check_native(native: dict[str, dict[str, Any]], model: str, backends: list[Any]) -> None:
    """Refuse a vLLM or transformers native key the installed framework does not have, where the
    run uses that installed framework: ``vllm-container`` runs its image's vLLM, whose arguments
    may differ, so the vllm section is not checked when one is in the run."""
    names = {n for b in backends for n in re.findall(r"[a-z][a-z0-9-]*", str(b))}
    local = {"vllm": bool(names & {"vllm", "vllm-server"}) and "vllm-container" not in names, "hf": "hf" in names}
    for section, label, known_of in (("vllm", "a vLLM engine argument", lambda: _vllm_keys()),
                                     ("hf", "a transformers from_pretrained keyword or config attribute of "
                                            "the model", lambda: _hf_keys(model))):
        keys = set(native.get(section) or {})
        if not keys or not local[section]:
            continue
        known = known_of()
        if known is None:
            continue
        for key in sorted(keys - known):
            raise UserError(f"--native {section}.{key}: not {label}{_nearest(key, known)}; check the name "
                            f"(`compare plan` shows what each backend is given)")


def check_sections(native: dict[str, dict[str, Any]]) -> None:
    """Every native section (``--native X.KEY=V``, a spec file's ``native: {X: ...}``) names a backend
    this program knows: options for a misspelt one would be dropped without a word."""
    from backends.registry import entries

    names = {e.name for e in entries()}
    for section, options in native.items():
        if section not in names:
            first = next(iter(options or {}), "KEY")
            raise UserError(f"--native {section}.{first}: no backend is called {section!r}"
                            f"{_nearest(section, names)}; see `compare backends`")
