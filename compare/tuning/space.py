"""``--knob`` ranges for ``compare tune`` against a backend's knob space (adapters/tuning.py
``Space``, declared by the engine's package and found through the registry entry's ``tuning``
hook), and the spec each trial starts with.

The space's rules are the ones the engine itself enforces at start-up; checking them here turns a
bad ``--knob`` range into one line before any engine is started, and lets the search skip
combinations the engine would refuse (recorded as infeasible, never started).
"""
from __future__ import annotations

import itertools
from typing import Any

from adapters.spec import ServingSpec
from adapters.tuning import Config, Space
from core.errors import UserError

class KnobError(UserError, ValueError):
    """A knob or range the backend does not accept; the message is one line naming the fix."""


def space_for(backend: str) -> Space:
    from backends import registry

    base = backend.partition("@")[0]
    tunable = registry.with_hook("tuning")
    for e in tunable:
        space = registry.tuning_of(e)
        if e.name == base and space is not None:
            return space
    raise KnobError(f"no tuning knobs known for backend {backend!r}; tunable: {', '.join(e.name for e in tunable)}")


def _parse_value(kind: type, text: str) -> Any:
    t = text.strip()
    if kind is bool:
        if t.lower() in ("true", "1", "on", "yes"):
            return True
        if t.lower() in ("false", "0", "off", "no"):
            return False
        return t
    try:
        v = float(t)
    except ValueError:
        return t
    return int(v) if kind is int and v == int(v) else v


def parse_knobs(space: Space, items: list[str], spec: ServingSpec, gpu: bool) -> dict[str, tuple[Any, ...]]:
    """``--knob NAME=V1,V2`` items -> the searched grid {knob: values}; defaults when none given.

    Without ``--knob`` every knob with default candidates is searched (GPU-only knobs only on a
    GPU). With ``--knob`` only the named knobs are searched.
    """
    grid: dict[str, tuple[Any, ...]] = {}
    for item in items:
        name, eq, vals = item.partition("=")
        name = name.strip()
        try:
            knob = space.knob(name)
        except KeyError:
            raise KnobError(f"--knob {item!r}: {space.backend} has no knob {name!r}; knobs: "
                            f"{', '.join(k.name for k in space.knobs)}") from None
        if not eq or not vals.strip():
            raise KnobError(f"--knob {item!r}: expected NAME=V1,V2,... e.g. --knob {name}=4,16,64")
        if knob.gpu_only and not gpu:
            raise KnobError(f"--knob {name}: only meaningful on a GPU (no GPU here); drop it")
        values = tuple(_parse_value(knob.kind, v) for v in vals.split(","))
        for v in values:
            reason = knob.check(v)
            if reason is None:
                # a value that breaks an engine rule on its own, whatever the other knobs are
                reason = space.rules({name: v}, spec, gpu)
            if reason:
                raise KnobError(f"--knob {name}={v}: {space.backend} rejects it: {reason}")
        grid[name] = tuple(dict.fromkeys(values))
    if not grid:
        grid = {k.name: k.values for k in space.knobs if k.values and (gpu or not k.gpu_only)}
    if not any(space.rules(c, spec, gpu) is None for c in grid_points(grid)):
        raise KnobError(f"--knob: no combination of {format_grid(grid)} is accepted by "
                        f"{space.backend} (e.g. {space.rules(grid_points(grid)[0], spec, gpu)}); widen the ranges")
    return grid


def grid_points(grid: dict[str, tuple[Any, ...]]) -> list[Config]:
    names = list(grid)
    return [dict(zip(names, combo)) for combo in itertools.product(*(grid[n] for n in names))]


def format_grid(grid: dict[str, tuple[Any, ...]]) -> str:
    return " x ".join(f"{k}={{{','.join(str(v) for v in vals)}}}" for k, vals in grid.items())


def apply_config(space: Space, spec: ServingSpec, cfg: Config) -> ServingSpec:
    """The spec the trial's engine is started with: knobs over the user's base spec."""
    update: dict[str, Any] = {}
    native = {k: dict(v) for k, v in spec.native.items()}
    for name, value in cfg.items():
        knob = space.knob(name)
        if knob.field:
            update[knob.field] = value
        else:
            native.setdefault(space.backend, {})[knob.native] = value
    if native != spec.native:
        update["native"] = native
    # re-validate: model_copy(update=...) would skip the spec's own field checks
    return ServingSpec(**{**spec.model_dump(), **update})


def config_label(cfg: Config) -> str:
    return "default" if not cfg else " ".join(f"{k}={v}" for k, v in sorted(cfg.items()))
