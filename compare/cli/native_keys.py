"""``--native BACKEND.KEY=VALUE`` checked against what the engine takes, before anything starts.

Most adapters refuse unknown native keys themselves. An engine whose native options are passed
through as they are (so an unknown key would only fail when the engine starts) checks them through
its registry entry's ``native_keys`` hook against the installed framework (backends/<engine>/
native.py). A framework that is not installed is not checked (its backend says so). Engine
defaults that depend on the machine come from the ``native_defaults`` hook.
"""
from __future__ import annotations

import difflib
import re
from typing import Any

from core.errors import UserError


def _nearest(key: str, known: set[str]) -> str:
    near = difflib.get_close_matches(key, sorted(known), n=3)
    return f" (nearest: {', '.join(near)})" if near else ""


def check_native(native: dict[str, dict[str, Any]], model: str, backends: list[Any]) -> None:
    """Refuse a native key the installed framework does not have, where every backend of the run
    that reads that section runs the installed framework (its entry's ``native_keys`` hook): a
    backend without the hook (a container runs its image's framework, whose arguments may differ)
    leaves the section unchecked."""
    from backends import registry

    names = {n for b in backends for n in re.findall(r"[a-z][a-z0-9-]*", str(b))}
    run = [e for e in registry.entries() if e.name in names]
    for section in sorted(native):
        keys = set(native.get(section) or {})
        readers = [e for e in run if (e.native_section or e.name) == section]
        if not keys or not readers or any(e.native_keys is None for e in readers):
            continue
        keys_of = registry.native_keys_of(readers[0])
        assert keys_of is not None  # every reader has the hook (checked above)
        label, known = keys_of(model, dict(native.get(section) or {}))
        if known is None:
            continue
        for key in sorted(keys - known):
            raise UserError(f"--native {section}.{key}: not {label}{_nearest(key, known)}; check the name "
                            f"(`compare plan` shows what each backend is given)")


def native_defaults(native: dict[str, dict[str, Any]], spec: Any, gpu: bool) -> dict[str, dict[str, Any]]:
    """``native`` with every engine's defaults for this machine (its entry's ``native_defaults``
    hook) under its section, where the user gave no value."""
    from backends import registry

    out = {k: dict(v) for k, v in native.items()}
    for e in registry.with_hook("native_defaults"):
        defaults = registry.native_defaults_of(e)
        for key, value in (defaults(spec, gpu) if defaults is not None else {}).items():
            out.setdefault(e.native_section or e.name, {}).setdefault(key, value)
    return out


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
