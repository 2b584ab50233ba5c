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
from typing import TYPE_CHECKING, Literal

from compare.cli.defaults import default_backends, has_gpu, tiny_defaults
from compare.cli.parser import run_id
from core.errors import UserError
from compare.cli.model_args import add_options, opt
from compare.cli.options import build_workload, spec_of
from compare.cli.run_options import SPEC, WORKLOAD, SpecOptions, WorkloadOptions

if TYPE_CHECKING:
    from core.results.tune import TuneResults

TUNE_WORKLOAD = {"name": "tune", "num_requests": 24, "input": {"dist": "uniform", "min": 32, "max": 96},
                 "output": {"dist": "fixed", "value": 16}}


SEARCH, OUTPUT = "search", "output"
_PROBES = "--repeats must be >= 1 and --max-probes >= 2"
_LOAD = "--start-load and --tol must be > 0"
_SECONDS = "--trial-timeout and --timeout are seconds > 0"  # (a trial or request given 0 s fails at once, each)
_FIRST = default_backends().split(",")[0]


class TuneOptions(SpecOptions, WorkloadOptions):
    """``compare tune``'s options: the spec and workload as `compare run` takes them, the search, the output."""

    backend: str = opt(_FIRST, f"backend(s) to tune, comma-separated (default {_FIRST})")
    slo: str = opt(..., "e.g. ttft_p95=2s,tpot_p95=50ms (required)", group=SEARCH)
    budget: int = opt(20, "engine starts per backend, default config included (default 20)", group=SEARCH, ge=1,
                      says="{flag} must be >= 1 (engine starts per backend, the default config included)")
    knob: list[str] = opt(help="search only these knobs over these values (repeatable); default: the backend's knob "
                          "space", default_factory=list, append=True, metavar="NAME=V1,V2", group=SEARCH)
    load: Literal["rate", "concurrency"] = opt("rate", "goodput as the max Poisson rate (default) or the max "
                                               "concurrency meeting the SLO", group=SEARCH)
    start_load: float = opt(1.0, "first load of the bracketing search", group=SEARCH, gt=0, says=_LOAD)
    tol: float = opt(0.15, "bisect the load until hi/lo <= 1+tol", group=SEARCH, gt=0, says=_LOAD)
    repeats: int = opt(2, "measurements at each config's goodput (CI)", group=SEARCH, ge=1, says=_PROBES)
    max_probes: int = opt(8, "load levels per trial before the repeats", group=SEARCH, ge=2, says=_PROBES)
    search_seed: int = opt(0, "search seed (same seed = same suggestions: resumable)", group=SEARCH)
    trial_timeout: float = opt(900.0, "seconds before a trial counts as hung", group=SEARCH, gt=0, says=_SECONDS)
    timeout: float = opt(120.0, "per-request timeout in seconds", group=SEARCH, gt=0, says=_SECONDS)
    out: Path = opt(Path("results"), "results root (default ./results)", group=OUTPUT)
    run_id: str | None = opt(None, "subdirectory name (default tune-TIMESTAMP)", parse=run_id, group=OUTPUT)
    cache_dir: Path | None = opt(None, "trial cache (default ~/.cache/llm-compare/tune); a re-run resumes from it",
                                 group=OUTPUT)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tune", help="find each backend's best config for an SLO (real engine starts)")
    add_options(p, TuneOptions, (SPEC, WORKLOAD, SEARCH, OUTPUT))  # default, check and help: TuneOptions
    p.set_defaults(func=lambda args: _tune(TuneOptions.of(args)))


def _validate(o: TuneOptions):
    from core.slo import SLO

    slo = SLO.parse(o.slo)
    if not slo:
        raise UserError("--slo is empty; give at least one limit, e.g. --slo ttft_p95=2s,tpot_p95=50ms")
    return slo  # the numbers' ranges: TuneOptions


def _tune(o: TuneOptions) -> int:
    from compare.tuning.space import KnobError, format_grid, parse_knobs, space_for

    slo = _validate(o)
    backends = [b.strip() for b in o.backend.split(",") if b.strip()]
    from backends.registry import entry_for

    tiny = tiny_defaults(o.spec_model, o.spec)
    spec = spec_of(o, defaults=tiny)
    gpu = has_gpu()
    if not gpu and spec.kv_cache_memory_bytes is None and spec.gpu_memory_utilization is None:
        spec = spec.model_copy(update={"kv_cache_memory_bytes": 2**30})  # vLLM on CPU needs a KV size
    if not Path(spec.model).exists() and spec.load_format != "dummy":
        raise UserError(f"model path {spec.model} does not exist; pass a local model directory")
    grids = {}
    for b in backends:
        entry_for(b)
        try:
            grids[b] = parse_knobs(space_for(b), o.knob, spec, gpu)
        except KnobError as e:
            raise UserError(str(e)) from None
    workload = build_workload(o, TUNE_WORKLOAD if tiny else None)
    from compare.cli.commands.run import _requests

    requests = _requests(None, spec, workload)
    run_id = o.run_id or time.strftime("tune-%Y%m%d-%H%M%S")
    out_dir = o.out / run_id
    from core.fsutil import check_dir_option

    check_dir_option(o.out, "--out")
    if o.cache_dir is not None:
        check_dir_option(o.cache_dir, "--cache-dir")
    if out_dir.exists():
        raise UserError(f"{out_dir} already exists; pick another --run-id")
    return _execute(o, backends, grids, spec, workload, requests, slo, out_dir, format_grid)


def _write_tune(out_dir: Path, tune: TuneResults) -> None:
    from core.fsutil import write_atomic
    from core.results.tune import tune_json_text

    write_atomic(out_dir / "tune.json", tune_json_text(tune))


def _execute(o: TuneOptions, backends, grids, spec, workload, requests, slo, out_dir, format_grid) -> int:
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
    load = LoadSearch(kind=o.load, start=o.start_load, tol=o.tol, max_probes=o.max_probes,
                      repeats=o.repeats, timeout_s=o.timeout, seed=workload.seed)
    fp = fingerprint()
    cache = o.cache_dir or cache_root() / "tune"
    tune = TuneResults(schema_=TUNE_SCHEMA, slo=[SloLimit(**t) for t in slo.to_json()],
                       load_search=LoadSearchInfo(**load.as_dict()), spec=SpecInfo(**spec.model_dump(mode="json")),
                       workload=WorkloadInfo(**workload.model_dump(mode="json")), hardware=fp, budget=o.budget,
                       search_seed=o.search_seed, status="running", backends=[])
    out_dir.mkdir(parents=True)
    for b in backends:
        space = space_for(b)
        console.print(f"[bold]tune {b}[/bold]: {format_grid(grids[b])}; budget {o.budget} engine starts")
        trials = LiveTrials(b, space, spec, workload, requests, slo, load, cache, hardware_key(fp),
                            trial_timeout_s=o.trial_timeout)

        def show(t, b=b):
            if t["status"] == "measured" and t.get("feasible"):
                ci = t["goodput_req_s"]
                what = (f"goodput {_max_load(t['bracket'], t['goodput'])} {o.load} (measured {ci['mean']:.2f} "
                        f"req/s [{ci['lo']:.2f}, {ci['hi']:.2f}])")
            elif t["status"] == "same as default":
                what = "the default's own values: its measurement reused, no engine start"
            else:
                what = f"infeasible: {t.get('reason')}"
            console.print(f"  {b} {t['label']}: {what}{' (cached)' if t.get('cached') else ''}")

        log = search(grids[b], o.budget, trials, seed=o.search_seed, baseline={},
                     rules=lambda c, s=space: s.rules(c, spec, has_gpu()), on_trial=show)
        tune = evolve(tune, backends=[*tune.backends, backend_report(b, log.trials)])
        _write_tune(out_dir, tune)
    tune = evolve(tune, status="complete")
    _write_tune(out_dir, tune)
    plot_pareto(tune.backends, slo.limits, out_dir / "pareto.png")
    _print_summary(console, tune, o.load)
    console.print(f"results: {out_dir}/tune.json, {out_dir}/pareto.png")
    infeasible = [r for r in tune.backends if r.best is None]
    if infeasible:
        r = infeasible[0]
        close = closest_of(r.trials)
        hint = ""
        if close:
            t, p = close
            worst = ", ".join(f"{k} {v.value_ms:.0f} ms > {v.limit_ms:g} ms" for k, v in p.slo_checks.items() if not v.met)
            hint = (f"; closest: {t.label} at {o.load} {p.load:g}: {worst or 'failed requests'} "
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
