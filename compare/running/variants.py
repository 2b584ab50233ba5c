"""``--vary FIELD=V1,V2``: each backend's knob variants as columns of their own, checked before anything starts.

A variant (adapters/variants.py) is built and planned by the registry exactly like its base; this
module decides, from the adapters' plans alone (pure, no engine started), whether each variant
means something on its backend:

- an adapter that refuses a value (``UnsupportedSpecError``) refuses the whole run, one line
  naming the variant, the field and the adapter's reason;
- an adapter that ignores the field (every value gives the same native config, e.g. the
  transformers reference records scheduler knobs as not applicable) is refused too: its columns
  would differ by noise only;
- a variant that equals the base spec's own value of the field is said so (a note, and run.json
  ``variants.columns[NAME].base_value``), so the base is never a silent duplicate of a column.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from adapters.spec import ServingSpec
from adapters.target import Load
from adapters.variants import Axis, Variant, expand, parse_axes, value_text
from backends.http.urls import redact_url
from backends.registry import Builder
from core.errors import UserError

# plan keys that say what a backend does NOT do with a spec: equal plans apart from these mean
# the field changed nothing the engine sees
_INERT_KEYS = ("not_applicable", "notes")


@dataclass(frozen=True)
class Expanded:
    targets: list[Variant]  # the run's backends, one per variant
    specs: dict[str, ServingSpec]  # variant name -> its spec (the run's per-backend specs)
    notes: list[str]  # one line each, for the console
    header: dict[str, Any]  # run.json "variants"


def _effective(plan: Any) -> Any:
    if isinstance(plan, dict):
        return {k: _effective(v) for k, v in plan.items() if k not in _INERT_KEYS}
    if isinstance(plan, list):
        return [_effective(v) for v in plan]
    return plan


def _plan(builder: Builder, target: Any, spec: ServingSpec, what: str) -> dict[str, Any]:
    try:
        return builder.prepare(target, spec).plan()
    except UserError as e:  # UnsupportedSpecError and other refusals of the adapter
        raise UserError(redact_url(f"--vary: {what} cannot run: {e}")) from None


def _check_axis(builder: Builder, b: Any, base: ServingSpec, axis: Axis) -> None:
    """Refuse an axis the backend ignores (or values it cannot tell apart)."""
    plans = []
    for v in axis.values:
        one = Variant(b, ((axis.field, v),))
        plans.append((one, _plan(builder, one, one.apply(base), one.name)))
    effective = [_effective(p) for _, p in plans]
    if len(axis.values) > 1 and all(e == effective[0] for e in effective):
        na = plans[0][1].get("not_applicable") if isinstance(plans[0][1], dict) else None
        why = ("it records the field as not applicable" if isinstance(na, dict) and axis.field in na
               else "its native config is identical for every value")
        shown = redact_url(str(b))  # credentials in a URL are never shown
        raise UserError(f"--vary {axis}: {shown} ignores {axis.field} ({why}; `compare plan --backends {shown}` shows "
                        f"it); vary it on a backend that uses it, or drop {shown} from --backends")
    for i in range(len(plans)):
        for j in range(i + 1, len(plans)):
            if effective[i] == effective[j]:
                raise UserError(redact_url(f"--vary {axis}: {plans[i][0].name} and {plans[j][0].name} give {b} the "
                                           f"same native config; keep one of the two values"))


def vary(backends: list[Any], spec_for: Callable[[str], ServingSpec], texts: list[str],
         load: Load | None = None) -> Expanded:
    """The run's backends replaced by their variants, every variant planned (nothing started)."""
    axes = parse_axes(texts)
    builder = Builder(load)
    for b in backends:
        for axis in axes:
            _check_axis(builder, b, spec_for(str(b)), axis)
    targets = expand(backends, axes)
    specs: dict[str, ServingSpec] = {}
    columns: dict[str, Any] = {}
    notes: list[str] = []
    for v in targets:
        base = spec_for(str(v.base))
        spec = v.apply(base)
        _plan(builder, v, spec, v.name)  # the grid's combinations are checked too
        specs[v.name] = spec
        same = [k for k, val in v.overrides if getattr(base, k) == val]
        columns[redact_url(v.name)] = {"backend": redact_url(str(v.base)), "overrides": {k: val for k, val in v.overrides},
                           "base_value": same}
        if len(same) == len(axes):
            notes.append(f"{v.name} runs the base spec's own "
                         f"{', '.join(f'{k}={value_text(getattr(base, k))}' for k in same)}")
    for b in backends:
        base = spec_for(str(b))
        for a in axes:
            own = getattr(base, a.field)
            if own not in a.values and own != ServingSpec.model_fields[a.field].default:
                notes.append(f"{b}: the base spec's {a.field}={value_text(own)} is not among --vary {a} "
                             f"and is not run")
    header = {"axes": {a.field: [value_text(x) for x in a.values] for a in axes}, "columns": columns}
    return Expanded(targets, specs, [redact_url(n) for n in notes], header)
