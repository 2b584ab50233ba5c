"""``compare plan``: the exact native configuration each backend would get. Starts nothing."""
from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Literal

import yaml

from compare.cli.defaults import default_backends, parse_backends
from compare.cli.model_args import add_options, opt
from compare.cli.options import spec_of
from compare.cli.run_options import SPEC, SpecOptions

if TYPE_CHECKING:
    from adapters.target import Machine


MACHINE = "the machine the plan is for (default: this one, probed)"
LOAD = "the load the plan is sized for (as `compare run` takes it)"


class PlanOptions(SpecOptions):
    """``compare plan``'s options: the spec (as `compare run` takes it), the machine and the load."""

    backends: str = opt(help="comma-separated backends (default %(default)s); see `compare backends`",
                        default_factory=default_backends)
    format: Literal["yaml", "json"] = opt("yaml")
    vary: list[str] | None = opt(None, "each backend's native config per value of a spec field, as `compare run "
                                 "--vary` runs it", metavar="FIELD=V1,V2", append=True)
    device: Literal["cpu", "cuda"] | None = opt(None, "plan for this kind of device instead of this machine's (e.g. a "
                                                "GPU box from a laptop)", group=MACHINE)
    gpu: str | None = opt(None, "with --device cuda: the GPU, e.g. H200, A100, L40S (its compute capability is "
                          "looked up)", metavar="NAME", group=MACHINE)
    compute_capability: str | None = opt(None, "with --device cuda: the GPU's compute capability, e.g. 9.0 (a GPU "
                                         "not in the lookup)", metavar="MAJOR.MINOR", group=MACHINE)
    cpu_flags: str | None = opt(None, "judge CPU kernels by these /proc/cpuinfo flags (another host's 'flags' line) "
                                "instead of this machine's", metavar="FLAGS", group=MACHINE)
    concurrency: str | None = opt(None, "closed-loop levels, e.g. 1,64,256 (default 1,4 when no --rate)", group=LOAD)
    rate: str | None = opt(None, "open-loop rates in req/s (every request of such a level may be in flight)",
                           group=LOAD)
    num_requests: int | None = opt(None, "requests per level (caps closed-loop levels; an open-loop level may have "
                                   "all in flight)", group=LOAD, gt=0, says="{flag} must be > 0")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="print each backend's native config for a spec (starts nothing)")
    add_options(p, PlanOptions, (SPEC, MACHINE, LOAD))  # each option's default, check and help: PlanOptions
    p.set_defaults(func=lambda args: _plan(PlanOptions.of(args)))


def _plan(o: PlanOptions) -> int:
    from backends.registry import Builder

    from compare.cli.defaults import DEFAULT_LEVELS
    from compare.running.load import offered_load
    from compare.workload.schedule import parse_levels
    from core.errors import UserError

    from backends.models.tiny import default_tiny_dir

    # no --model: the embedded tiny model, probed like any checkpoint where it is built already
    # (adapters that size caches from the model's shape need its config.json)
    tiny = default_tiny_dir()
    spec = spec_of(o, default_model=str(tiny) if (tiny / "config.json").is_file() else "<tiny model>")
    try:
        levels = parse_levels(o.concurrency if (o.concurrency or o.rate) else DEFAULT_LEVELS, o.rate)
    except ValueError as e:
        raise UserError(str(e)) from None
    # model and machine probed once; each backend's plan resolved once, sized for the load (TGI)
    machine = _machine(o)
    builder = Builder(offered_load(levels, o.num_requests), machine)
    names = parse_backends(o.backends)
    if spec.native:  # unknown vLLM / transformers keys (compare/cli/native_keys.py)
        from compare.cli.native_keys import check_native

        check_native(spec.native, spec.model, names)
    if o.vary:  # the variants `compare run --vary` would run, refused the same way (compare/running/variants.py)
        from adapters.variants import parse_axes
        from compare.running.variants import vary

        v = vary(names, lambda _: spec, parse_axes(o.vary), builder.load, machine)
        plans = {t.name: builder.prepare(t, v.specs[t.name]).plan() for t in v.targets}
    else:
        plans = {name: builder.prepare(name, spec).plan() for name in names}
    out = {"spec": spec.model_dump(mode="json", exclude_defaults=True), "backends": plans}
    if machine is not None:  # planned for another machine: say which
        out = {"machine": {k: v for k, v in (("device", machine.device), ("gpu", machine.gpu_name),
                                             ("compute_capability", machine.compute_capability)) if v}, **out}
    if o.format == "json":
        print(json.dumps(out, indent=2, default=str))
    else:
        print(yaml.safe_dump(out, sort_keys=False, default_flow_style=False), end="")
    return 0


def _machine(o: PlanOptions) -> "Machine | None":
    """The machine named by --device/--gpu/--compute-capability/--cpu-flags; None: this one (probed)."""
    from adapters.gpus import planned_machine
    from adapters.target import Machine

    gpu_named = bool(o.gpu or o.compute_capability)
    if o.device is None and not gpu_named and o.cpu_flags is None:
        return None
    device = o.device or ("cuda" if gpu_named else "cpu")  # --gpu H200 alone means a GPU box
    flags = frozenset(o.cpu_flags.split()) if o.cpu_flags is not None else None
    if flags is None and device == "cpu" and not gpu_named:  # this machine's CPU
        from backends.models.probe import probe_machine

        here = probe_machine()
        return here if here.device == "cpu" else Machine("cpu", cpu_flags=here.cpu_flags,
                                                         native_cpu_flags=here.native_cpu_flags)
    # another machine (a GPU named beside --device cpu is refused there): its CPU is the flags
    # given, or not known (nothing refused for its instruction sets)
    return planned_machine(device, o.gpu, o.compute_capability, flags)
