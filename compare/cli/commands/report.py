"""``compare report RESULTS_DIR [--html] [--out FILE]``: render a results directory.

Only the results files are read (run.json, requests.jsonl), so any old run can be re-rendered.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from compare.cli.model_args import add_options
from compare.cli.run_options import VerdictOptions
from core.errors import UserError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="render a results directory as Markdown or self-contained HTML")
    p.add_argument("results", type=Path, help="results directory written by `compare run`")
    p.add_argument("--html", action="store_true", help="self-contained HTML with plots (default Markdown)")
    p.add_argument("--out", type=Path, help="output file (default: stdout for Markdown, "
                                            "RESULTS_DIR/report.html for HTML)")
    add_options(p, VerdictOptions)  # --gpu-hour-price, --margin: as `compare run` takes them
    p.add_argument("--require-slo", nargs="?", const="", default=None, metavar="SLO",
                   help="exit 1 unless every backend meets the SLO (the run's own, or the one given, e.g. "
                        "ttft_p95=2s) at every level with no failed request; one line per miss (as `compare run "
                        "--require-slo`)")
    p.set_defaults(func=_report)


def render(results: Path, html: bool, out: Path | None, price: float | None = None,
           margin: float | None = None) -> Path | None:
    """Render and write; returns the file written (None: Markdown went to stdout)."""
    from core.fsutil import write_user_file
    from compare.report import load_report_data, render_html, render_markdown

    data = load_report_data(results, gpu_hour_price=price, margin=margin)
    text = render_html(data) if html else render_markdown(data)
    if out is None and html:
        out = Path(results) / "report.html"
    if out is None:
        sys.stdout.write(text)
        return None
    write_user_file(out, text, "--out")
    return out


def _report(args: argparse.Namespace) -> int:
    verdict = VerdictOptions.of(args)
    if not args.results.is_dir():
        raise UserError(f"{args.results} is not a directory: pass a results directory written by `compare run`")
    from compare.cli.killed import settle_dir

    settle_dir(args.results)  # a killed run is recorded as such, not reported as still running
    written = render(args.results, args.html, args.out, verdict.gpu_hour_price, verdict.margin)
    if written:
        print(f"report written to {written}", file=sys.stderr)
    if args.require_slo is not None:  # exit 1 (SLOMissed) with one line per miss (compare/analysis/slo_gate.py)
        from compare.analysis.slo_gate import require_slo_met
        from core.slo import SLO

        require_slo_met(args.results, SLO.parse(args.require_slo) if args.require_slo else None)
    return 0
