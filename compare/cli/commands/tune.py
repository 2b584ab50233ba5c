"""``compare tune``: search a backend's scheduling knobs for the highest goodput under an SLO.

    compare tune --backend vllm --model M --workload W --slo ttft_p95=2s,tpot_p95=50ms [--budget 20]

Writes DIR/tune.json (every trial with its probes, the best config per backend with its goodput
and CI, the gain over the default config, the Pareto frontier) and DIR/pareto.png. Use the result
with ``compare run --tuned DIR``. See docs/tuning.md.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import TYPE_CHECKING

from compare.cli.defaults import default_backends, has_gpu, tiny_defaults
from compare.cli.parser import run_id
from core.errors import UserError
from compare.cli.options import add_spec_options, add_workload_options, spec_from_args, workload_from_args

if TYPE_CHECKING:
    from core.results.tune import TuneResults

TUNE_WORKLOAD = {"name": "tune", "num_requests": 24, "input": {"dist": "uniform", "min": 32, "max": 96},
                 "output": {"dist": "fixed", "value": 16}}


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tune", help="find each backend's best config for an SLO (real engine starts)")
    first = default_backends().split(",")[0]
    p.add_argument("--backend", default=first, help=f"backend(s) to tune, comma-separated (default {first})")
    add_spec_options(p)
    add_workload_options(p)
    g = p.add_argument_group("search")
    g.add_argument("--slo", required=True, help="e.g. ttft_p95=2s,tpot_p95=50ms (required)")
    g.add_argument("--budget", type=int, default=20, help="engine starts per backend, default config included (default 20)")
    g.add_argument("--knob", action="append", default=[], metavar="NAME=V1,V2",
                   help="search only these knobs over these values (repeatable); default: the backend's knob space")
    g.add_argument("--load", choices=["rate", "concurrency"], default="rate",
                   help="goodput as the max Poisson rate (default) or the max concurrency meeting the SLO")
    g.add_argument("--start-load", type=float, default=1.0, help="first load of the bracketing search")
    g.add_argument("--tol", type=float, default=0.15, help="bisect the load until hi/lo <= 1+tol")
    g.add_argument("--repeats", type=int, default=2, help="measurements at each config's goodput (CI)")
    g.add_argument("--max-probes", type=int, default=8, help="load levels per trial before the repeats")
    g.add_argument("--search-seed", type=int, default=0, help="search seed (same seed = same suggestions: resumable)")
    g.add_argument("--trial-timeout", type=float, default=900.0, help="seconds before a trial counts as hung")
    g.add_argument("--timeout", type=float, default=120.0, help="per-request timeout in seconds")
    o = p.add_argument_group("output")
    o.add_argument("--out", type=Path, default=Path("results"), help="results root (default ./results)")
    o.add_argument("--run-id", type=run_id, default=None, help="subdirectory name (default tune-TIMESTAMP)")
    o.add_argument("--cache-dir", type=Path, default=None,
                   help="trial cache (default ~/.cache/llm-compare/tune); a re-run resumes from it")
    p.set_defaults(func=_tune)


def _validate(args: argparse.Namespace):
    from core.slo import SLO

    slo = SLO.parse(args.slo)
    if not slo:
        raise UserError("--slo is empty; give at least one limit, e.g. --slo ttft_p95=2s,tpot_p95=50ms")
    if args.budget < 1:
        raise UserError("--budget must be >= 1 (engine starts per backend, the default config included)")
    if args.repeats < 1 or args.max_probes < 2:
        raise UserError("--repeats must be >= 1 and --max-probes >= 2")
    if args.start_load <= 0 or args.tol <= 0:
        raise UserError("--start-load and --tol must be > 0")
    if args.trial_timeout <= 0 or args.timeout <= 0:  # (a trial or request given 0 s fails at once, each)
        raise UserError("--trial-timeout and --timeout are seconds > 0")
    return slo


def _tune(args: argparse.Namespace) -> int:
    from compare.tuning.space import KnobError, format_grid, parse_knobs, space_for

    slo = _validate(args)
    backends = [b.strip() for b in args.backend.split(",") if b.strip()]
    from backends.registry import entry_for

    tiny = tiny_defaults(args.spec_model, args.spec)
    spec = spec_from_args(args, defaults=tiny)
    gpu = has_gpu()
    if not gpu and spec.kv_cache_memory_bytes is None and spec.gpu_memory_utilization is None:
        spec = spec.model_copy(update={"kv_cache_memory_bytes": 2**30})  # vLLM on CPU needs a KV size
    if not Path(spec.model).exists() and spec.load_format != "dummy":
        raise UserError(f"model path {spec.model} does not exist; pass a local model directory")
    grids = {}
    for b in backends:
        entry_for(b)
        try:
            grids[b] = parse_knobs(space_for(b), args.knob, spec, gpu)
        except KnobError as e:
            raise UserError(str(e)) from None
    workload = workload_from_args(args, TUNE_WORKLOAD if tiny else None)
    from compare.cli.commands.run import _requests

    requests = _requests(None, spec, workload)
    run_id = args.run_id or time.strftime("tune-%Y%m%d-%H%M%S")
    out_dir = args.out / run_id
    from core.fsutil import check_dir_option

    check_dir_option(args.out, "--out")
    if args.cache_dir is not None:
        check_dir_option(args.cache_dir, "--cache-dir")
    if out_dir.exists():
        raise UserError(f"{out_dir} already exists; pick another --run-id")
    return _execute(args, backends, grids, spec, workload, requests, slo, out_dir, format_grid)


def _write_tune(out_dir: Path, tune: TuneResults) -> None:
    from core.fsutil import write_atomic
    from core.results.tune import tune_json_text

    write_atomic(out_dir / "tune.json", tune_json_text(tune))


def _execute(args, backends, grids, spec, workload, requests, slo, out_dir, format_grid) -> int:
    from rich.console import Console

    from core.hardware import fingerprint
    from core.results.evolve import evolve
    from core.results.max_rate import LoadSearchInfo
    from core.results.models import SpecInfo, WorkloadInfo
    from core.results.slo import SloLimit
    from core.results.tune import TUNE_SCHEMA, TuneResults
    from backends.models.tiny import cache_root
    from compare.tuning.search import LiveTrials, closest_of, hardware_key, search
    from compare.tuning.probe import LoadSearch
    from compare.tuning.report import backend_report, plot_pareto
    from compare.tuning.space import space_for

    console = Console(stderr=True)
    load = LoadSearch(kind=args.load, start=args.start_load, tol=args.tol, max_probes=args.max_probes,
                      repeats=args.repeats, timeout_s=args.timeout, seed=workload.seed)
    fp = fingerprint()
    cache = args.cache_dir or cache_root() / "tune"
    tune = TuneResults(schema_=TUNE_SCHEMA, slo=[SloLimit(**t) for t in slo.to_json()],
                       load_search=LoadSearchInfo(**load.as_dict()), spec=SpecInfo(**spec.model_dump(mode="json")),
                       workload=WorkloadInfo(**workload.model_dump(mode="json")), hardware=fp, budget=args.budget,
                       search_seed=args.search_seed, status="running", backends=[])
    out_dir.mkdir(parents=True)
    for b in backends:
        space = space_for(b)
        console.print(f"[bold]tune {b}[/bold]: {format_grid(grids[b])}; budget {args.budget} engine starts")
        trials = LiveTrials(b, space, spec, workload, requests, slo, load, cache, hardware_key(fp),
                            trial_timeout_s=args.trial_timeout)

        def show(t, b=b):
            if t["status"] == "measured" and t.get("feasible"):
                ci = t["goodput_req_s"]
                what = (f"goodput {_max_load(t['bracket'], t['goodput'])} {args.load} (measured {ci['mean']:.2f} "
                        f"req/s [{ci['lo']:.2f}, {ci['hi']:.2f}])")
            elif t["status"] == "same as default":
                what = "the default's own values: its measurement reused, no engine start"
            else:
                what = f"infeasible: {t.get('reason')}"
            console.print(f"  {b} {t['label']}: {what}{' (cached)' if t.get('cached') else ''}")

        log = search(grids[b], args.budget, trials, seed=args.search_seed, baseline={},
                     rules=lambda c, s=space: s.rules(c, spec, has_gpu()), on_trial=show)
        tune = evolve(tune, backends=[*tune.backends, backend_report(b, log.trials)])
        _write_tune(out_dir, tune)
    tune = evolve(tune, status="complete")
    _write_tune(out_dir, tune)
    plot_pareto(tune.backends, slo.limits, out_dir / "pareto.png")
    _print_summary(console, tune, args.load)
    console.print(f"results: {out_dir}/tune.json, {out_dir}/pareto.png")
    infeasible = [r for r in tune.backends if r.best is None]
    if infeasible:
        r = infeasible[0]
        close = closest_of(r.trials)
        hint = ""
        if close:
            t, p = close
            worst = ", ".join(f"{k} {v.value_ms:.0f} ms > {v.limit_ms:g} ms" for k, v in p.slo_checks.items() if not v.met)
            hint = (f"; closest: {t.label} at {args.load} {p.load:g}: {worst or 'failed requests'} "
                    f"({p.slo_attainment:.0%} of requests within the SLO)")
        raise UserError(f"no config of {r.backend} meets the SLO {slo} at any load tried{hint}; "
                        f"relax the SLO or widen --knob ranges")
    return 0


def _max_load(bracket, goodput) -> str:
    """">= 16" when the SLO still held at the highest load tried (the bracket never closed)."""
    return f"{'>= ' if bracket[1] is None else ''}{goodput:g}"


def _print_summary(console, tune: TuneResults, load_kind: str) -> None:
    from rich.table import Table

    t = Table(title="tuned vs default (goodput = max load meeting the SLO)")
    for col in ("backend", "config", f"max {load_kind}", "goodput req/s (95% CI)", "TTFT p95", "TPOT p95"):
        t.add_column(col)
    for r in tune.backends:
        for tag, trial in (("best", r.best), ("default", r.default)):
            if not trial or not trial.feasible:
                t.add_row(r.backend, f"{tag}: {trial.label if trial else '-'}", "infeasible", "-", "-", "-")
                continue
            ci, at = trial.goodput_req_s, trial.at_goodput
            t.add_row(r.backend, f"{tag}: {trial.label}", _max_load(trial.bracket, trial.goodput),
                      f"{ci.mean:.2f} [{ci.lo:.2f}, {ci.hi:.2f}] n={ci.n}" if ci else "-",
                      f"{at.ttft_p95_ms:.0f} ms" if at else "-", f"{at.tpot_p95_ms:.1f} ms" if at else "-")
    console.print(t)
    for r in tune.backends:
        console.print(f"  {r.backend}: {r.gain.verdict if r.gain else '-'}; {r.engine_starts} engine starts, "
                      f"{r.cache_hits} trials from the cache")
