"""The knobs ``compare tune`` searches for one backend and the rules its engine enforces on them
(pure: no engine is imported). Each engine declares its :class:`Space` in its backends package
(``tuning.py``), named by the registry entry's ``tuning`` hook; compare/tuning/space.py parses
``--knob`` ranges against it and builds the trial specs.

A knob sets either a framework-neutral ``ServingSpec`` field (the adapters turn it into the
engine's own flag, so the tuned engine is started exactly like ``compare run`` would) or, where the
spec has no such field, a native option of that backend (``spec.native[Space.backend]``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from adapters.spec import ServingSpec

Config = dict[str, Any]  # knob name -> value; {} is the framework's default config


@dataclass(frozen=True)
class Knob:
    name: str  # as the user writes it: --knob NAME=V1,V2
    values: tuple[Any, ...]  # default candidates (small: every trial is a real engine start)
    kind: type  # int | bool | float
    field: str | None = None  # ServingSpec field it sets ...
    native: str | None = None  # ... or the backend's native option name
    gpu_only: bool = False  # meaningless on CPU (e.g. a GPU memory fraction)
    help: str = ""

    def check(self, value: Any) -> str | None:
        if self.kind is bool:
            return None if isinstance(value, bool) else "must be true or false"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"must be a number, got {value!r}"
        if self.kind is int and value != int(value):
            return f"must be a whole number, got {value!r}"
        if self.name in _FRACTIONS and not 0 < value <= 1:
            return f"must be a fraction in (0, 1], got {value!r}"
        if self.name not in _FRACTIONS and value <= 0:
            return f"must be > 0, got {value!r}"
        return None


_FRACTIONS = {"gpu_memory_utilization", "kv_free_fraction", "cuda-memory-fraction"}  # knob names whose values are fractions


@dataclass(frozen=True)
class Space:
    backend: str
    knobs: tuple[Knob, ...]
    rules: Callable[[Config, ServingSpec, bool], str | None]

    def knob(self, name: str) -> Knob:
        for k in self.knobs:
            if k.name == name:
                return k
        raise KeyError(name)
