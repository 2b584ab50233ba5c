"""The fake engine's timing model: what it is told (the name's target or the spec's native
options) resolved into one typed record (FakeOptions). Pure: no I/O, no clock.

    fake@ttft=50ms+itl=10ms            the name's target: KEY=VALUE terms joined by '+' (',' separates
                                       backends in --backends)
    --native fake.ttft=50ms            the spec's native options (a target wins over them)

Durations take a unit (ns, us, ms, s; a bare number is milliseconds); fractions are 0..1.
"""
from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from typing import Any

from adapters.spec import ServingSpec
from core.errors import UserError

# option -> (kind, default, meaning)
OPTIONS: dict[str, tuple[str, Any, str]] = {
    "ttft": ("duration", 20.0, "time to the first token of a request that got a sequence slot"),
    "prefill": ("duration", 0.0, "added to the first token per prompt token"),
    "itl": ("duration", 5.0, "time between two output tokens"),
    "batch": ("number", 0.0, "ITL grows by this fraction per other running sequence"),
    "seqs": ("int", None, "sequence slots (requests beyond them queue); default the spec's max_num_seqs, else 64"),
    "start": ("duration", 0.0, "engine start time (a slow start)"),
    "start_fail": ("bool", False, "the engine start fails"),
    "stop": ("duration", 0.0, "engine shutdown time (a slow teardown)"),
    "fail": ("fraction", 0.0, "fraction of requests that fail after their first token (chosen by request id)"),
    "stall": ("duration", 0.0, "a pause in the middle of a stalled request's output"),
    "stall_frac": ("fraction", 1.0, "fraction of requests that stall when stall is set (chosen by request id)"),
    "die_after": ("int", None, "the engine dies after this many requests: later ones fail as engine_dead"),
}
DEFAULT_SEQS = 64
_UNIT_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
# bounds that keep a typo (ttft=99999999s, batch=1e300) from a run that never ends
MAX_DURATION_MS = 3600e3
MAX_NUMBER = 1000.0
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(ns|us|ms|s)?\s*$")


@dataclass(frozen=True)
class FakeOptions:
    """The resolved timing model (durations in ms; OPTIONS says what each one means)."""

    ttft: float = 20.0
    prefill: float = 0.0
    itl: float = 5.0
    batch: float = 0.0
    seqs: int = DEFAULT_SEQS
    start: float = 0.0
    start_fail: bool = False
    stop: float = 0.0
    fail: float = 0.0
    stall: float = 0.0
    stall_frac: float = 1.0
    die_after: int | None = None
    max_model_len: int | None = None  # the spec's (a prompt + max_tokens beyond it is refused)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class FakeOptionError(UserError, ValueError):
    pass


def _value(key: str, raw: Any) -> Any:
    kind = OPTIONS[key][0]
    text = str(raw).strip().lower()
    try:
        if kind == "duration":
            m = _DURATION.match(text)
            if not m:
                raise ValueError
            ms = float(m.group(1)) * _UNIT_MS[m.group(2) or "ms"]
            if ms > MAX_DURATION_MS:
                raise ValueError
            return ms
        if kind == "bool":
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if kind == "int":
            v = int(text)
            if v < 1:
                raise ValueError
            return v
        v = float(text)
        if not math.isfinite(v) or v < 0 or v > (1 if kind == "fraction" else MAX_NUMBER):
            raise ValueError
        return v
    except ValueError:
        want = {"duration": "a duration such as 50ms or 2s (at most 1 hour)", "bool": "true or false",
                "int": "an integer >= 1", "number": f"a number from 0 to {MAX_NUMBER:g}",
                "fraction": "a number from 0 to 1"}[kind]
        raise FakeOptionError(f"fake engine option {key}={raw!r}: expected {want} "
                              f"(e.g. fake@ttft=50ms+itl=10ms)") from None


def parse_target(target: str | None) -> dict[str, str]:
    """``ttft=50ms+itl=10ms`` -> {"ttft": "50ms", "itl": "10ms"} (',' between terms works too)."""
    out: dict[str, str] = {}
    for term in re.split(r"[+,]", target or ""):
        if not term.strip():
            continue
        key, eq, val = term.partition("=")
        if not eq:
            raise FakeOptionError(f"fake engine target term {term!r} is not KEY=VALUE (e.g. fake@ttft=50ms+itl=10ms)")
        if key.strip() in out:
            raise FakeOptionError(f"fake engine option {key.strip()} is given twice in {target!r}; give it once")
        out[key.strip()] = val.strip()
    return out


def timing_model(spec: ServingSpec, target: str | None = None) -> FakeOptions:
    """The resolved model: every option's value (durations in ms), the sequence slots, and which
    spec fields it models; an unknown option is one line naming the known ones."""
    given = {**spec.native_for("fake"), **parse_target(target)}
    unknown = sorted(set(given) - set(OPTIONS))
    if unknown:
        raise FakeOptionError(f"unknown fake engine option(s) {', '.join(unknown)}; known: {', '.join(OPTIONS)}")
    model = {k: (_value(k, given[k]) if k in given else default) for k, (_, default, _) in OPTIONS.items()}
    if model["seqs"] is None:
        model["seqs"] = spec.max_num_seqs or DEFAULT_SEQS
    return FakeOptions(**model, max_model_len=spec.max_model_len)
