"""``compare plan``: the exact native configuration each backend would get. Starts nothing."""
from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

import yaml

from compare.cli.defaults import add_backends_option, parse_backends
from compare.cli.options import add_spec_options, spec_from_args

if TYPE_CHECKING:
    from adapters.target import Machine


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="print each backend's native config for a spec (starts nothing)")
    add_backends_option(p)
    add_spec_options(p)
    p.add_argument("--format", choices=["yaml", "json"], default="yaml")
    p.add_argument("--vary", action="append", metavar="FIELD=V1,V2",
                   help="each backend's native config per value of a spec field, as `compare run --vary` runs it")
    m = p.add_argument_group("the machine the plan is for (default: this one, probed)")
    m.add_argument("--device", choices=["cpu", "cuda"], default=None,
                   help="plan for this kind of device instead of this machine's (e.g. a GPU box from a laptop)")
    m.add_argument("--gpu", default=None, metavar="NAME",
                   help="with --device cuda: the GPU, e.g. H200, A100, L40S (its compute capability is looked up)")
    m.add_argument("--compute-capability", default=None, metavar="MAJOR.MINOR",
                   help="with --device cuda: the GPU's compute capability, e.g. 9.0 (a GPU not in the lookup)")
    m.add_argument("--cpu-flags", default=None, metavar="FLAGS",
                   help="judge CPU kernels by these /proc/cpuinfo flags (another host's 'flags' line) instead of this machine's")
    g = p.add_argument_group("the load the plan is sized for (as `compare run` takes it)")
    g.add_argument("--concurrency", help="closed-loop levels, e.g. 1,64,256 (default 1,4 when no --rate)")
    g.add_argument("--rate", help="open-loop rates in req/s (every request of such a level may be in flight)")
    g.add_argument("--num-requests", type=int, default=None,
                   help="requests per level (caps closed-loop levels; an open-loop level may have all in flight)")
    p.set_defaults(func=_plan)


def _plan(args: argparse.Namespace) -> int:
    from backends.registry import Builder

    from compare.cli.defaults import DEFAULT_LEVELS
    from compare.running.load import offered_load
    from compare.workload.schedule import parse_levels
    from core.errors import UserError

    from backends.models.tiny import default_tiny_dir

    # no --model: the embedded tiny model, probed like any checkpoint where it is built already
    # (adapters that size caches from the model's shape need its config.json)
    tiny = default_tiny_dir()
    spec = spec_from_args(args, default_model=str(tiny) if (tiny / "config.json").is_file() else "<tiny model>")
    try:
        levels = parse_levels(args.concurrency if (args.concurrency or args.rate) else DEFAULT_LEVELS, args.rate)
    except ValueError as e:
        raise UserError(str(e)) from None
    if args.num_requests is not None and args.num_requests <= 0:
        raise UserError("--num-requests must be > 0")
    # model and machine probed once; each backend's plan resolved once, sized for the load (TGI)
    machine = _machine(args)
    builder = Builder(offered_load(levels, args.num_requests), machine)
    names = parse_backends(args.backends)
    if spec.native:  # unknown vLLM / transformers keys (compare/cli/native_keys.py)
        from compare.cli.native_keys import check_native

        check_native(spec.native, spec.model, names)
    if args.vary:  # the variants `compare run --vary` would run, refused the same way (compare/running/variants.py)
        from adapters.variants import parse_axes
        from compare.running.variants import vary

        v = vary(names, lambda _: spec, parse_axes(args.vary), builder.load, machine)
        plans = {t.name: builder.prepare(t, v.specs[t.name]).plan() for t in v.targets}
    else:
        plans = {name: builder.prepare(name, spec).plan() for name in names}
    out = {"spec": spec.model_dump(mode="json", exclude_defaults=True), "backends": plans}
    if machine is not None:  # planned for another machine: say which
        out = {"machine": {k: v for k, v in (("device", machine.device), ("gpu", machine.gpu_name),
                                             ("compute_capability", machine.compute_capability)) if v}, **out}
    if args.format == "json":
        print(json.dumps(out, indent=2, default=str))
    else:
        print(yaml.safe_dump(out, sort_keys=False, default_flow_style=False), end="")
    return 0


def _machine(args: argparse.Namespace) -> "Machine | None":
    """The machine named by --device/--gpu/--compute-capability/--cpu-flags; None: this one (probed)."""
    from adapters.gpus import planned_machine
    from adapters.target import Machine

    gpu_named = bool(args.gpu or args.compute_capability)
    if args.device is None and not gpu_named and args.cpu_flags is None:
        return None
    device = args.device or ("cuda" if gpu_named else "cpu")  # --gpu H200 alone means a GPU box
    flags = frozenset(args.cpu_flags.split()) if args.cpu_flags is not None else None
    if flags is None and device == "cpu" and not gpu_named:  # this machine's CPU
        from backends.models.probe import probe_machine

        here = probe_machine()
        return here if here.device == "cpu" else Machine("cpu", cpu_flags=here.cpu_flags,
                                                         native_cpu_flags=here.native_cpu_flags)
    # another machine (a GPU named beside --device cpu is refused there): its CPU is the flags
    # given, or not known (nothing refused for its instruction sets)
    return planned_machine(device, args.gpu, args.compute_capability, flags)
