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
- ``quantization`` is the exception to the first rule: engines implement different schemes, so
  ``--backends vllm,llamacpp --vary quantization=w8a8-fp8,gguf-q8_0`` compares each engine's own
  8-bit scheme. A value a backend's adapter refuses is not run on that backend (a note with the
  adapter's reason, run.json ``variants.not_run``); a backend that runs none of the values
  refuses the run.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from adapters.spec import ServingSpec, UnsupportedSpecError
from adapters.target import Load, Machine
from adapters.variants import Axis, Variant, expand, value_text
from backends.http.urls import redact_url
from backends.registry import Builder
from core.errors import UserError

# fields whose values each backend runs only where its adapter implements them (the rest: not run)
PER_ENGINE_FIELDS = ("quantization",)

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


def _runnable(builder: Builder, b: Any, base: ServingSpec, axis: Axis, not_run: dict[str, str]) -> Axis:
    """The axis restricted to the values the backend's adapter implements (PER_ENGINE_FIELDS)."""
    if axis.field not in PER_ENGINE_FIELDS:
        return axis
    ok: list[Any] = []
    reasons: list[str] = []
    for v in axis.values:
        one = Variant(b, ((axis.field, v),))
        try:
            builder.prepare(one, one.apply(base)).plan()
            ok.append(v)
        except UnsupportedSpecError as e:
            reasons.append(str(e))
            not_run[redact_url(one.name)] = str(e)
    if not ok:
        shown = redact_url(str(b))
        raise UserError(redact_url(f"--vary {axis}: {shown} runs none of these values ({reasons[0]}); add a value "
                                   f"it implements (`compare quant matrix` lists them) or drop {shown} from --backends"))
    return Axis(axis.field, tuple(ok))


def vary(backends: list[Any], spec_for: Callable[[str], ServingSpec], axes: tuple[Axis, ...],
         load: Load | None = None, machine: Machine | None = None, builder: Builder | None = None) -> Expanded:
    """The run's backends replaced by their variants along ``axes`` (adapters.variants.parse_axes,
    read once at the CLI edge), every variant planned (nothing started); ``machine``: the one to
    plan for (default: this one, probed); ``builder``: the run's own, whose plans the run reuses."""
    builder = builder or Builder(load, machine)
    not_run: dict[str, str] = {}
    targets: list[Variant] = []
    for b in backends:
        own = tuple(_runnable(builder, b, spec_for(str(b)), axis, not_run) for axis in axes)
        for axis in own:
            _check_axis(builder, b, spec_for(str(b)), axis)
        targets += expand([b], own)
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
    header: dict[str, Any] = {"axes": {a.field: [value_text(x) for x in a.values] for a in axes}, "columns": columns}
    if not_run:
        header["not_run"] = not_run
        notes += [f"{name} not run: {why}" for name, why in not_run.items()]
    return Expanded(targets, specs, [redact_url(n) for n in notes], header)
