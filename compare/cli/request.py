"""``compare run``'s options as one typed, checked value: :class:`RunRequest`.

:func:`run_request` is the one place that reads the parsed command line. It converts every option
to a typed value, resolves the defaults (the embedded tiny model, or what already running servers
serve) and refuses bad input with one line (exit 2) before anything is started or written. What
runs afterwards (compare/cli/commands/run.py ``execute``) takes the request, never the options.
"""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from adapters.variants import Axis, parse_axes
from compare.cli import max_rate
from compare.cli.defaults import (
    DEFAULT_LEVELS, DEFAULT_WORKLOAD, ServedRun, has_gpu, parse_backends, served_defaults, tiny_defaults,
)
from compare.cli.options import (
    WorkloadFlags, apply_topology, build_spec, build_workload, check_price_margin, scaleout, spec_flags,
)
from core.errors import UserError

if TYPE_CHECKING:
    from adapters.spec import ServingSpec
    from compare.quality.parity import QualityOptions
    from compare.workload.build import WorkloadSpec
    from compare.workload.schedule import LoadLevel
    from core.slo import SLO


@dataclass(frozen=True)
class Output:
    """How the run's outcome is shown and judged (``--format``, ``--gpu-hour-price``, ``--margin``...)."""

    format: str = "table"  # table, json, md, html
    price: float | None = None  # one accelerator-hour: cost per million output tokens in the verdict
    margin: float | None = None  # the verdict's equivalence / non-inferiority margin
    quiet: bool = False
    require_slo: bool = False  # exit 1 unless every backend meets every SLO term at every level


@dataclass(frozen=True)
class RunRequest:
    """Everything ``compare run`` was asked to do, typed and checked."""

    targets: tuple[Any, ...]  # backend names, or typed topologies (backends/topology/target.py)
    levels: tuple[LoadLevel, ...]
    slo: SLO
    spec: ServingSpec  # with the machine's engine defaults
    workload: WorkloadSpec
    quality: QualityOptions
    served: ServedRun | None = None  # already running servers, without --model: their model is the run's
    replay: str | None = None  # RESULTS_DIR whose requests are replayed
    levels_given: bool = False  # --concurrency/--rate given (else a replayed trace keeps its clock)
    dataset: tuple[str, str | None] | None = None  # --dataset FILE, --dataset-columns (compare/workload/datasets.py)
    trace: dict[str, Any] | None = None  # --trace FILE and its options (compare/workload/traces.py)
    requests_per_stream: int | None = None
    max_rate: max_rate.MaxRateOptions | None = None  # --find-max-rate
    warmup: int = 2
    timeout_s: float = 600.0
    max_errors: int | None = None
    repeats: int = 1
    client_procs: int | None = None  # None: auto
    scaleout: Any = None  # compare.running.ray_cells.ScaleOut (--ray)
    tuned: str | None = None  # TUNE_DIR (or its tune.json)
    vary: tuple[Axis, ...] = ()  # --vary FIELD=V1,V2, parsed and checked
    out: Path = Path("results")
    run_id: str | None = None  # None: a timestamp
    verbose: bool = False
    output: Output = Output()


def run_request(args: argparse.Namespace) -> RunRequest:
    """The request ``compare run``'s options make; bad input: one-line UserError, nothing written."""
    from core.slo import SLO

    # typed targets: --topology tp=N,replicas=N wraps each backend (backends/topology/target.py)
    names = parse_backends(args.backends)
    targets = apply_topology(names, args.topology, args.lb, args.kill_replica_after,
                             args.kill_level)
    levels = _levels(args.concurrency, args.rate, args.requests_per_stream,
                     getattr(args, "arrival", "poisson"), getattr(args, "burstiness", 1.0))
    if args.warmup < 0:
        raise UserError("--warmup must be >= 0")
    if args.repeats < 1:
        raise UserError("--repeats must be >= 1 (2 or more give confidence intervals)")
    check_price_margin(args.gpu_hour_price, args.margin)
    if args.timeout <= 0:
        raise UserError("--timeout must be > 0 seconds")
    axes = parse_axes(args.vary)  # a bad --vary fails before any model is built (compare/running/variants.py plans it)
    if args.require_slo and not args.slo:
        raise UserError("--require-slo checks the run against --slo: give one, e.g. --slo ttft_p95=2s,tpot_p95=100ms")
    slo = SLO.parse(args.slo)
    search = max_rate.options(args.find_max_rate, slo, args.max_rate_start, args.max_rate_probes, args.max_rate_tol)
    if args.max_errors is not None and args.max_errors < 0:
        raise UserError("--max-errors must be >= 0")
    procs = client_procs(args.client_procs)
    quality = quality_options(args.quality, args.quality_device, args.quality_prompts, args.quality_reference)
    # --ray: the cells as Ray tasks (compare/running/ray_cells.py)
    ray = scaleout(args.ray, args.ray_load_shards, args.ray_max_clock_error_ms, names)
    served, spec, workload = _spec_and_workload(args, names, targets)
    duration, warm, cool = (getattr(args, k, None) for k in ("duration", "warmup_seconds", "cooldown_seconds"))
    levels = _bounded(levels, duration, warm, cool, workload)
    if search is not None:  # --find-max-rate probes the same kind of open-loop level as --rate
        import dataclasses

        search = dataclasses.replace(search, arrival=getattr(args, "arrival", "poisson"),
                                     burstiness=getattr(args, "burstiness", 1.0), duration_s=duration,
                                     warmup_s=warm, cooldown_s=cool)
    return RunRequest(
        targets=tuple(targets), levels=tuple(levels), slo=slo, spec=spec, workload=workload, quality=quality,
        served=served, replay=args.replay, trace=_trace(args), levels_given=bool(args.concurrency or args.rate),
        dataset=(args.dataset, args.dataset_columns) if getattr(args, "dataset", None) else None,
        requests_per_stream=args.requests_per_stream, max_rate=search,
        warmup=args.warmup, timeout_s=args.timeout, max_errors=args.max_errors, repeats=args.repeats,
        client_procs=procs, scaleout=ray, tuned=args.tuned, vary=axes, out=args.out,
        run_id=args.run_id, verbose=args.verbose,
        output=Output(format=args.format, price=args.gpu_hour_price, margin=args.margin, quiet=args.quiet,
                      require_slo=args.require_slo))


def _spec_and_workload(args: argparse.Namespace, names: list[str], targets: list[Any]) -> tuple[ServedRun | None, ServingSpec, WorkloadSpec]:
    """The serving spec and the workload, over their defaults: what already running servers serve
    (no --model: the model is theirs, common.py), else the embedded tiny model, else none."""
    served, defaults = served_defaults(args.spec_model, args.spec, names, args.timeout, args.spec_tokenizer)
    if served is None:
        defaults = tiny_defaults(args.spec_model, args.spec, names)
    tiny = served is None and bool(defaults)
    spec = build_spec(args.spec, spec_flags(args), args.native or [], defaults=defaults)
    if spec.native and served is None:  # unknown vLLM / transformers keys, before anything starts
        from compare.cli.native_keys import check_native

        check_native(spec.native, spec.model, targets)
    if served is None and not tiny and "://" not in spec.model and not Path(spec.model).exists() and spec.load_format != "dummy":
        raise UserError(f"model path {spec.model} does not exist; pass a local model directory "
                        f"(no hub downloads here)")
    if served is None and not tiny and "://" not in spec.model:  # what the engines would refuse minutes later
        from compare.cli.model_check import check_gguf, check_model_dir

        check_model_dir(spec.model)
        for section, options in spec.native.items():  # a GGUF served as is (llama.cpp's native gguf)
            if (options or {}).get("gguf") is not None:
                check_gguf(f"--native {section}.gguf", str(options["gguf"]))
    if served is None:
        # machine-dependent engine defaults (vLLM on CPU needs an explicit KV-cache size), each
        # under its engine's native section: other frameworks keep their own defaults
        from compare.cli.native_keys import native_defaults

        native = native_defaults(spec.native, spec, has_gpu())
        if native != spec.native:
            spec = spec.model_copy(update={"native": native})
    workload = build_workload(WorkloadFlags.of(args),
                              DEFAULT_WORKLOAD if tiny else served.workload_defaults() if served else None)
    return served, spec, workload


def _bounded(levels: list[LoadLevel], duration: float | None, warmup: float | None, cooldown: float | None,
             workload: Any) -> list[LoadLevel]:
    """``--duration``: each --rate level cut to the sends inside it, its warm-up and cool-down
    trimmed from its statistics (compare/workload/duration.py)."""
    from compare.workload.duration import bound_levels

    try:
        return bound_levels(levels, duration, workload.num_requests, workload.seed, warmup, cooldown)
    except ValueError as e:
        raise UserError(str(e)) from None


def _levels(concurrency: str | None, rate: str | None, per_stream: int | None,
            arrival: str = "poisson", burstiness: float = 1.0) -> list[LoadLevel]:
    """``--concurrency``/``--rate`` as load levels (DEFAULT_LEVELS when neither is given)."""
    from compare.workload.schedule import parse_levels

    conc = concurrency if (concurrency or rate) else DEFAULT_LEVELS
    if arrival != "poisson" and not rate:
        raise UserError(f"--arrival {arrival} shapes open-loop levels: give --rate too, e.g. --rate 2,8 "
                        f"--arrival {arrival}")
    if burstiness != 1.0 and arrival != "gamma":
        raise UserError(f"--burstiness {burstiness:g} applies to gamma arrivals: add --arrival gamma")
    try:
        levels = parse_levels(conc, rate, arrival, burstiness)
    except ValueError as e:
        msg = str(e)
        raise UserError(msg if msg.startswith("--") else f"--{msg}") from None  # "rate must be > 0, got nan"
    labels = [lv.label for lv in levels]
    twice = sorted({x for x in labels if labels.count(x) > 1})
    if twice:
        raise UserError(f"load level {', '.join(twice)} is given twice in --concurrency/--rate; give each level once")
    if per_stream is not None:
        if per_stream < 1:
            raise UserError(f"--requests-per-stream {per_stream}: each stream sends at least one request, e.g. "
                            f"--requests-per-stream 4")
        if not any(lv.kind == "concurrency" for lv in levels):
            raise UserError("--requests-per-stream sizes closed-loop levels (--concurrency); an open-loop --rate "
                            "level sends every request")
    return levels


def client_procs(value: str) -> int | None:
    """``--client-procs``: None for auto, else a count >= 1."""
    if value.strip().lower() == "auto":
        return None
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise UserError(f"--client-procs {value!r}: give a number of processes >= 1 or 'auto'")
    most = max(8, 4 * (os.cpu_count() or 1))  # more load generators than that only contend for the cores
    if n > most:
        raise UserError(f"--client-procs {n}: at most {most} here (4 per CPU core); or 'auto'")
    return n


def quality_options(mode: str, device: str, prompts: int, reference: str | None) -> QualityOptions:
    """``--quality*`` as QualityOptions (compare/quality/parity.py); the reference must be a model directory."""
    from compare.quality.parity import QualityOptions

    if prompts < 1:
        raise UserError(f"--quality-prompts {prompts}: give at least 1 (or --quality off)")
    if reference is not None and not Path(reference, "config.json").is_file():
        raise UserError(f"--quality-reference {reference}: no config.json there; pass a local model directory")
    return QualityOptions(mode=mode, device=device, num_prompts=prompts,
                          reference_model=str(Path(reference).resolve()) if reference else None)


def _trace(args: Any) -> dict[str, Any] | None:
    if not getattr(args, "trace", None):
        return None
    return {"path": args.trace, "fmt": args.trace_format, "speedup": args.trace_speedup,
            "window": args.trace_window, "cap": args.trace_max_requests}
