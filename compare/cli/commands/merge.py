"""``compare merge RUN_DIR RUN_DIR ... --out DIR --run-id ID``: runs of one comparison as one run.

A comparison measured in parts (one engine, or one repeat, per ``compare run``) becomes one results
directory with repeats, which ``compare report``, the verdict and the gate read like a
``--repeats`` run (compare/running/merge.py says how the inputs are checked and pooled).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from compare.cli.parser import run_id


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("merge", help="merge results directories of one workload into one run with repeats")
    p.add_argument("runs", type=Path, nargs="+", metavar="RUN_DIR",
                   help="results directories written by `compare run` with the same workload, levels and spec")
    p.add_argument("--out", type=Path, default=Path("results"), help="results root (default ./results)")
    p.add_argument("--run-id", type=run_id, default=None,
                   help="the merged run's subdirectory name: letters, digits, ._- (default: timestamp)")
    p.set_defaults(func=_merge)


def _merge(args: argparse.Namespace) -> int:
    from compare.cli.killed import settle_dir
    from compare.running.merge import merge_runs
    from core.results import new_run_id

    for d in args.runs:  # a run killed outright is recorded as such, not taken for one still running
        settle_dir(d)
    d = merge_runs(args.runs, args.out, args.run_id or new_run_id())
    print(f"merged {len(args.runs)} runs into {d}; render it with `compare report {d}`", file=sys.stderr)
    print(d)
    return 0
