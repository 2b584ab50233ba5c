"""Knob variants: one backend run under several values of spec fields, each as a column of its own.

    compare run --backends vllm --vary block_size=16,32                  vllm[block_size=16], vllm[block_size=32]
    compare run --backends vllm --vary block_size=16,32 --vary max_num_seqs=4,8   the 2 x 2 grid

A variant is the base backend with some :class:`ServingSpec` fields overridden; its display name
(``vllm[block_size=32,max_num_seqs=8]``) is what results, baselines and reports file it under.
The registry builds and plans a variant exactly like its base (backends/registry.py); the
overridden spec travels as the run's per-backend spec (run.json ``backend_specs``). Pure: parsing,
expansion and names only; whether a backend can honour a variant is decided by planning it
(compare/running/variants.py).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from adapters.spec import SPEC_CLI_FIELDS, ServingSpec
from core.errors import UserError

# every spec field the CLI can set, except the model itself (a model A/B is a different question:
# another tokenizer, another workload)
VARYABLE: tuple[str, ...] = tuple(f for f in SPEC_CLI_FIELDS if f not in ("model", "tokenizer"))
DEFAULT_WORDS = ("default", "none", "null")  # the framework's own default (None) where a field allows it
_EXAMPLE = "e.g. --vary block_size=16,32"


@dataclass(frozen=True)
class Axis:
    """One ``--vary FIELD=V1,V2``: the field and its values, parsed with the field's type."""

    field: str
    values: tuple[Any, ...]

    def __str__(self) -> str:
        return f"{self.field}={','.join(value_text(v) for v in self.values)}"


def value_text(v: Any) -> str:
    """How a value is written in a variant's name: 32, true, 0.9, default."""
    if v is None:
        return "default"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def _parse_value(field: str, text: str) -> Any:
    info = ServingSpec.model_fields[field]
    if text.strip().lower() in DEFAULT_WORDS:
        if info.is_required() or info.default is not None:
            raise UserError(f"--vary {field}={text}: {field} has no framework default to fall back to; "
                            f"give values, {_EXAMPLE}")
        return None
    # validated on a throwaway spec: the field's type and bounds (gt=0, Literal choices) apply
    try:
        return getattr(ServingSpec.model_validate({"model": "-", field: text.strip()}), field)
    except ValidationError as e:
        raise UserError(f"--vary {field}={text.strip()}: {e.errors()[0]['msg']} ({_EXAMPLE})") from None


def parse_axis(text: str) -> Axis:
    """``block_size=16,32`` -> Axis; one line naming the problem (and the valid fields) otherwise."""
    field, eq, vals = text.partition("=")
    field = field.strip().replace("-", "_")
    if not eq or field not in VARYABLE:
        what = f"unknown field {field!r}" if eq and field else "expected FIELD=V1,V2"
        raise UserError(f"--vary {text!r}: {what}; valid fields: {', '.join(VARYABLE)} ({_EXAMPLE})")
    parts = vals.split(",")
    if not vals.strip():
        raise UserError(f"--vary {text!r}: no values; {_EXAMPLE}")
    if any(not v.strip() for v in parts):
        raise UserError(f"--vary {text!r}: an empty value between commas; {_EXAMPLE}")
    values = tuple(_parse_value(field, v) for v in parts)
    seen: dict[Any, str] = {}
    for v, raw in zip(values, parts):
        key = (type(v), v)
        if key in seen:
            raise UserError(f"--vary {text!r}: {seen[key].strip()} and {raw.strip()} are the same value "
                            f"({value_text(v)}); give each value once")
        seen[key] = raw
    return Axis(field, values)


def parse_axes(texts: list[str] | None) -> tuple[Axis, ...]:
    axes = tuple(parse_axis(t) for t in texts or ())
    fields = [a.field for a in axes]
    dup = sorted({f for f in fields if fields.count(f) > 1})
    if dup:
        raise UserError(f"--vary names {', '.join(dup)} twice; give all its values in one --vary, {_EXAMPLE}")
    return axes


@dataclass(frozen=True)
class Variant:
    """The base backend (a name or a typed target: ``str(base)`` is its name) with ``overrides``."""

    base: Any
    overrides: tuple[tuple[str, Any], ...]

    @property
    def name(self) -> str:
        return f"{self.base}[{','.join(f'{k}={value_text(v)}' for k, v in self.overrides)}]"

    def __str__(self) -> str:
        return self.name

    def apply(self, spec: ServingSpec) -> ServingSpec:
        """The base spec with the overrides, validated as a whole (a value may clash with another field)."""
        try:
            return ServingSpec.model_validate({**spec.model_dump(), **dict(self.overrides)})
        except ValidationError as e:
            raise UserError(f"{self.name}: {e.errors()[0]['msg']}") from None


def expand(backends: list[Any], axes: tuple[Axis, ...]) -> list[Variant]:
    """Every backend x every combination of the axes' values, in the order given (the grid's last
    axis varies fastest)."""
    out = []
    for b in backends:
        for combo in itertools.product(*(a.values for a in axes)):
            out.append(Variant(b, tuple(zip((a.field for a in axes), combo))))
    return out


def split_variant(name: str) -> tuple[str, dict[str, str]]:
    """``vllm[block_size=32,max_num_seqs=8]`` -> ("vllm", {"block_size": "32", "max_num_seqs": "8"});
    a plain name -> (name, {})."""
    if not name.endswith("]") or "[" not in name:
        return name, {}
    base, _, inner = name[:-1].rpartition("[")
    pairs = [p.partition("=") for p in inner.split(",")]
    if not base or any(not eq for _, eq, _ in pairs):
        return name, {}
    return base, {k: v for k, _, v in pairs}


def split_names(text: str) -> list[str]:
    """A comma-separated list of backend names whose variant names hold commas themselves:
    ``vllm[a=1,b=2],hf`` -> ["vllm[a=1,b=2]", "hf"]."""
    out: list[str] = []
    cur: list[str] = []
    depth = 0
    for c in text:
        depth += (c == "[") - (c == "]")
        if c == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(c)
    out.append("".join(cur).strip())
    return [n for n in out if n]
