"""``compare check --baseline NAME RESULTS``: the regression gate.

Exit codes: 0 no regression, 1 regression (a metric worse beyond its noise-derived threshold,
new failed requests, or an incomplete run), 2 usage error (missing baseline, other workload...).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from core.errors import UserError


def add_parser(sub: argparse._SubParsersAction) -> None:
    from compare.analysis.gate import DEFAULT_ALPHA, DEFAULT_FLOOR

    p = sub.add_parser("check", help="check RESULTS against a saved baseline (exit 1 on regression)")
    p.add_argument("results", type=Path, help="results directory of the candidate run")
    p.add_argument("--baseline", required=True, help="baseline name (in --dir) or path to its .json")
    p.add_argument("--dir", type=Path, default=Path("baselines"), help="baseline directory (default ./baselines)")
    p.add_argument("--floor", type=float, default=DEFAULT_FLOOR,
                   help=f"smallest relative change ever called a regression (default {DEFAULT_FLOOR})")
    p.add_argument("--alpha", type=float, default=DEFAULT_ALPHA,
                   help=f"false-alarm rate of the whole check: threshold = max(floor, t(1-alpha/metrics, df) x "
                        f"baseline repeat noise x sqrt(1/n_b+1/n_c)) (default {DEFAULT_ALPHA})")
    p.add_argument("--backends", help="check only these backends of the baseline, comma-separated "
                   "(the candidate re-ran only them); default: every backend the baseline has")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.set_defaults(func=_check)


def _check(args: argparse.Namespace) -> int:
    from compare.analysis.gate import check, ensure_comparable, load_baseline, select_backends, workload_digest
    from core.results import load_results

    if not 0 <= args.floor < 1:
        raise UserError("--floor is a fraction, e.g. 0.05 for 5%")
    if not 0 < args.alpha < 1:
        raise UserError("--alpha is a probability, e.g. 0.05")
    from compare.cli.killed import settle_dir

    settle_dir(args.results)  # a killed run is recorded as such, not taken for one still running
    from core.fsutil import check_dir_option

    check_dir_option(args.dir, "--dir")
    base = load_baseline(args.baseline, args.dir)  # the model; a file of another layout: one line
    if args.backends is not None:
        from adapters.variants import split_names  # variant names hold commas: vllm[block_size=32,max_num_seqs=8]

        base = select_backends(base, split_names(args.backends))
    run, records = load_results(args.results)
    ensure_comparable(base, run, workload_digest(args.results))
    res = check(base, run, records, floor=args.floor, alpha=args.alpha)
    if args.format == "json":
        print(json.dumps({"baseline": base.name, "results": str(args.results), "regression": res.regressed,
                          "problems": res.problems, "notes": res.notes, "environment_changes": res.env_changes,
                          "checks": [c.__dict__ for c in res.checks]}, indent=2))
        return res.exit_code
    print(f"compare check: {args.results} against baseline {base.name} (run {base.run_id}, "
          f"{base.repeats} repeat(s))")
    for c in res.checks:
        print("  " + c.line(args.floor))
    for p in res.problems:
        print(f"  REGRESSION {p}")
    for n in res.notes:
        print(f"  note: {n}")
    print("what changed in the environment:" if res.env_changes else "environment: unchanged")
    for line in res.env_changes:
        print(f"  {line}")
    worse = sum(c.regression for c in res.checks) + len(res.problems)
    print(f"RESULT: {'REGRESSION' if res.regressed else 'PASS'} ({worse} regression(s), "
          f"{len(res.checks)} metric(s) checked)")
    return res.exit_code
