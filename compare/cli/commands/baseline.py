"""``compare baseline save RESULTS --name NAME``: freeze a run as the reference for ``compare check``.

Baselines are small plain JSON files (default directory ./baselines) meant to live in git.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from core.errors import UserError
from core.results import load_results


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("baseline", help="save a results directory as a named regression baseline")
    bsub = p.add_subparsers(dest="baseline_command", metavar="ACTION")
    s = bsub.add_parser("save", help="save RESULTS as baseline NAME (record it with --repeats 3 or more)")
    s.add_argument("results", type=Path, help="results directory written by `compare run`")
    s.add_argument("--name", required=True, help="baseline name, e.g. vllm-0.32-cpu")
    s.add_argument("--dir", type=Path, default=Path("baselines"), help="baseline directory (default ./baselines)")
    s.add_argument("--force", action="store_true", help="overwrite an existing baseline of that name")
    s.set_defaults(func=_save)
    p.set_defaults(func=_no_action)


def _no_action(args: argparse.Namespace) -> int:
    raise UserError("compare baseline: name an action, e.g. `compare baseline save RESULTS --name NAME`")


def _save(args: argparse.Namespace) -> int:
    from compare.analysis.gate import baseline_path, make_baseline, save_baseline, workload_digest
    from core.fsutil import check_dir_option

    if "/" in args.name or args.name.endswith(".json"):
        raise UserError(f"--name {args.name!r}: a baseline name is a name, not a path (e.g. vllm-0.32-cpu); "
                        f"say where it goes with --dir DIR")
    baseline_path(args.name, args.dir)  # a name of letters, digits, '.', '_', '-': checked before reading
    check_dir_option(args.dir, "--dir")

    from compare.cli.killed import settle_dir

    settle_dir(args.results)  # a killed run is recorded as such, not taken for one still running
    run, records = load_results(args.results)
    if run.status != "complete":
        raise UserError(f"{args.results}: run status is {run.status!r}; a baseline must come from a "
                        f"complete run")
    path = baseline_path(args.name, args.dir)
    if path.exists() and not args.force:
        raise UserError(f"baseline {path} already exists; pick another --name or pass --force")
    base = make_baseline(run, records, args.name, workload_digest(args.results), source=str(args.results))
    if not base.metrics:
        raise UserError(f"{args.results}: no usable measurements to save")
    out = save_baseline(base, args.dir)
    print(f"baseline {args.name} saved to {out} ({base.repeats} repeat(s), backends "
          f"{', '.join(base.metrics)}, levels {', '.join(base.levels)})")
    if base.repeats < 2:
        print("note: 1 repeat, so `compare check` can only use the floor as threshold; "
              "record the baseline with --repeats 3 to derive thresholds from its noise")
    elif base.repeats == 2:
        print("note: 2 repeats give each metric too few degrees of freedom for its own noise, so the "
              "thresholds pool noise over metrics and miss small slowdowns; record with --repeats 3")
    return 0
