"""``compare run``'s options as one typed, checked value: :class:`RunRequest`.

:func:`run_request` is the one place that reads the parsed command line: it reads it into the
typed, range-checked :class:`compare.cli.run_options.RunOptions` (argparse is generated from that
model), then resolves the defaults (the embedded tiny model, or what already running servers
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
from compare.cli.options import apply_topology, build_spec, build_workload, scaleout
from compare.cli.run_options import RunOptions
from core.errors import UserError

if TYPE_CHECKING:
    from adapters.spec import ServingSpec
    from compare.quality.parity import QualityOptions
    from compare.workload.build import WorkloadSpec
    from compare.workload.schedule import LoadLevel
    from core.slo import SLO


def _default(option: str) -> Any:
    """A request made without the command line (tests, other tools) takes the option's own default."""
    return RunOptions.model_fields[option].default


@dataclass(frozen=True)
class Output:
    """How the run's outcome is shown and judged (``--format``, ``--gpu-hour-price``, ``--margin``...)."""

    format: str = _default("format")  # table, json, md, html
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
    warmup: int = _default("warmup")
    timeout_s: float = _default("timeout")
    max_errors: int | None = None
    repeats: int = _default("repeats")
    client_procs: int | None = None  # None: auto
    scaleout: Any = None  # compare.running.ray_cells.ScaleOut (--ray)
    tuned: str | None = None  # TUNE_DIR (or its tune.json)
    vary: tuple[Axis, ...] = ()  # --vary FIELD=V1,V2, parsed and checked
    out: Path = _default("out")
    run_id: str | None = None  # None: a timestamp
    verbose: bool = False
    output: Output = Output()


def run_request(args: argparse.Namespace) -> RunRequest:
    """The request ``compare run``'s options make; bad input: one-line UserError, nothing written."""
    return request_of(RunOptions.of(args))  # each option's type, default and range: run_options.py


def request_of(o: RunOptions) -> RunRequest:
    """The options resolved into a RunRequest: backends typed, defaults found (the tiny model or the
    servers' own), the checks that span several options."""
    from core.slo import SLO

    names = parse_backends(o.backends)
    # typed targets: --topology tp=N,replicas=N wraps each backend (backends/topology/target.py)
    targets = apply_topology(names, o.topology, o.lb, o.kill_replica_after, o.kill_level)
    levels = _levels(o.concurrency, o.rate, o.requests_per_stream, o.arrival, o.burstiness)
    axes = parse_axes(o.vary)  # a bad --vary fails before any model is built (compare/running/variants.py plans it)
    if o.require_slo and not o.slo:
        raise UserError("--require-slo checks the run against --slo: give one, e.g. --slo ttft_p95=2s,tpot_p95=100ms")
    slo = SLO.parse(o.slo)
    search = max_rate.options(o.find_max_rate, slo, o.max_rate_start, o.max_rate_probes, o.max_rate_tol)
    procs = client_procs(o.client_procs)
    quality = quality_options(o.quality, o.quality_device, o.quality_prompts, o.quality_reference)
    # --ray: the cells as Ray tasks (compare/running/ray_cells.py)
    ray = scaleout(o.ray, o.ray_load_shards, o.ray_max_clock_error_ms, names)
    served, spec, workload = _spec_and_workload(o, names, targets)
    levels = _bounded(levels, o.duration, o.warmup_seconds, o.cooldown_seconds, workload)
    if search is not None:  # --find-max-rate probes the same kind of open-loop level as --rate
        import dataclasses

        search = dataclasses.replace(search, arrival=o.arrival, burstiness=o.burstiness, duration_s=o.duration,
                                     warmup_s=o.warmup_seconds, cooldown_s=o.cooldown_seconds)
    return RunRequest(
        targets=tuple(targets), levels=tuple(levels), slo=slo, spec=spec, workload=workload, quality=quality,
        served=served, replay=o.replay, trace=o.trace_options(), levels_given=bool(o.concurrency or o.rate),
        dataset=(o.dataset, o.dataset_columns) if o.dataset else None,
        requests_per_stream=o.requests_per_stream, max_rate=search,
        warmup=o.warmup, timeout_s=o.timeout, max_errors=o.max_errors, repeats=o.repeats,
        client_procs=procs, scaleout=ray, tuned=o.tuned, vary=axes, out=o.out,
        run_id=o.run_id, verbose=o.verbose,
        output=Output(format=o.format, price=o.gpu_hour_price, margin=o.margin, quiet=o.quiet,
                      require_slo=o.require_slo))


def _spec_and_workload(o: RunOptions, names: list[str], targets: list[Any]) -> tuple[ServedRun | None, ServingSpec, WorkloadSpec]:
    """The serving spec and the workload, over their defaults: what already running servers serve
    (no --model: the model is theirs, defaults.py), else the embedded tiny model, else none."""
    served, defaults = served_defaults(o.spec_model, o.spec, names, o.timeout, o.spec_tokenizer)
    if served is None:
        defaults = tiny_defaults(o.spec_model, o.spec, names)
    tiny = served is None and bool(defaults)
    spec = build_spec(o.spec, o.flags(), o.native, defaults=defaults)
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
    workload = build_workload(o,
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

    if reference is not None and not Path(reference, "config.json").is_file():
        raise UserError(f"--quality-reference {reference}: no config.json there; pass a local model directory")
    return QualityOptions(mode=mode, device=device, num_prompts=prompts,
                          reference_model=str(Path(reference).resolve()) if reference else None)
