"""``compare plan``: the exact native configuration each backend would get. Starts nothing."""
from __future__ import annotations

import argparse
import json

import yaml

from compare.cli.commands.common import add_backends_option, parse_backends
from compare.cli.options import add_spec_options, spec_from_args


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="print each backend's native config for a spec (starts nothing)")
    add_backends_option(p)
    add_spec_options(p)
    p.add_argument("--format", choices=["yaml", "json"], default="yaml")
    p.set_defaults(func=_plan)


def _plan(args: argparse.Namespace) -> int:
    from backends.registry import Builder

    spec = spec_from_args(args, default_model="<tiny model>")
    builder = Builder()  # model and machine probed once; each backend's plan resolved once
    out = {"spec": spec.model_dump(mode="json", exclude_defaults=True),
           "backends": {name: builder.prepare(name, spec).plan() for name in parse_backends(args.backends)}}
    if args.format == "json":
        print(json.dumps(out, indent=2, default=str))
    else:
        print(yaml.safe_dump(out, sort_keys=False, default_flow_style=False), end="")
    return 0
