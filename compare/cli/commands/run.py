"""``compare run``: replay one seeded workload on every backend, measure, compare, write results.

With no arguments it is the embedded default: builds (once) the tiny Qwen2 model and compares
vllm and hf on CPU.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import replace
from pathlib import Path

from compare.cli import max_rate
from compare.cli.parser import run_id
from compare.running import aio
from compare.cli.commands.common import (
    DEFAULT_LEVELS, DEFAULT_WORKLOAD, add_backends_option, has_gpu, served_defaults, tiny_defaults,
    parse_backends,
)
from core.errors import UserError
from compare.cli.options import (
    add_ray_options, add_spec_options, add_topology_options, add_workload_options, apply_topology, scaleout_from_args,
    spec_from_args, workload_from_args,
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run the workload on each backend and compare (default command)")
    add_backends_option(p)
    add_spec_options(p)
    add_workload_options(p)
    g = p.add_argument_group("load and measurement")
    g.add_argument("--concurrency", help=f"closed-loop levels, e.g. 1,4,16 (default {DEFAULT_LEVELS} "
                                         "when no --rate is given)")
    g.add_argument("--rate", help="open-loop Poisson rates in req/s, e.g. 2,8,inf")
    g.add_argument("--requests-per-stream", type=int, metavar="K",
                   help="each closed-loop level at concurrency C sends the workload's first min(N, K*C) requests "
                        "(the same prefix on every backend), so single-stream levels stay short while saturated "
                        "ones still get K waves; default: every level sends all N")
    g.add_argument("--slo", help="e.g. ttft_p95=2s,tpot_p95=100ms (goodput counts requests meeting each limit)")
    g.add_argument("--require-slo", action="store_true",
                   help="a deployment guard (needs --slo): exit 1 unless every backend (and variant) meets every "
                        "SLO term at EVERY measured load level with no failed request, one line per miss; "
                        "measure only the loads the deployment must sustain (results are kept either way)")
    g.add_argument("--vary", action="append", metavar="FIELD=V1,V2",
                   help="run each backend once per value of a spec field, each as its own column, e.g. "
                        "--vary block_size=16,32 (vllm[block_size=16], vllm[block_size=32]); repeat the "
                        "flag for a grid; 'default' = the framework's own default")
    g.add_argument("--warmup", type=int, default=2, help="warm-up requests per backend (not measured)")
    g.add_argument("--timeout", type=float, default=600.0, help="per-request timeout in seconds")
    g.add_argument("--max-errors", type=int, default=None,
                   help="stop a backend's level after this many failed requests (default: half)")
    g.add_argument("--replay", metavar="RESULTS_DIR", help="replay the exact requests of an earlier run")
    g.add_argument("--client-procs", default="auto", metavar="N|auto",
                   help="load-generator processes per level for HTTP backends (one shared start instant, "
                        "one clock, records merged). auto: two free cores each after 4 for an engine on "
                        "this machine (1 on small machines and for in-process backends), one per 16 "
                        "closed-loop streams; N > 1 is refused for in-process backends")
    g.add_argument("--repeats", type=int, default=1,
                   help="runs per backend, each with a fresh engine, interleaved A B A B (>= 2 gives "
                        "confidence intervals; 3 recommended for baselines)")
    q = p.add_argument_group("quality (vs the float32 transformers reference, scored after the engines stop)")
    q.add_argument("--quality", choices=["auto", "on", "off"], default="auto",
                   help="auto (default): measure reduced-precision and quantized runs (bf16/fp16, a quantization, "
                        "a quantized checkpoint); on: every backend; off: speed only")
    q.add_argument("--quality-device", choices=["auto", "cpu", "cuda"], default="auto",
                   help="where the reference runs once every engine has stopped (auto: the GPU when its free "
                        "memory holds the float32 model, else the CPU when RAM does, else skipped with why)")
    q.add_argument("--quality-reference", metavar="DIR",
                   help="reference model directory (default: a quantized checkpoint's recorded source, else the model)")
    q.add_argument("--quality-prompts", type=int, default=8, metavar="N", help="probe requests per backend (default 8)")
    o = p.add_argument_group("output")
    o.add_argument("--out", type=Path, default=Path("results"), help="results root (default ./results)")
    o.add_argument("--run-id", type=run_id, default=None,
                   help="results subdirectory name: letters, digits, ._- (default: timestamp)")
    o.add_argument("--format", choices=["table", "json", "md", "html"], default="table",
                   help="table: console; json: run.json + verdict on stdout; md: Markdown report on "
                        "stdout; html: RESULTS/report.html (all rendered from the results files)")
    o.add_argument("-q", "--quiet", action="store_true",
                   help="print only the verdict and the results path")
    o.add_argument("-v", "--verbose", action="store_true",
                   help="stream the engines' own logs to the console (always kept in RESULTS/logs/)")
    o.add_argument("--gpu-hour-price", type=float, default=None,
                   help="price of one accelerator-hour: adds cost per million output tokens to the verdict")
    o.add_argument("--margin", type=float, default=None,
                   help="equivalence / non-inferiority margin for the verdict, e.g. 0.05")
    add_topology_options(p)
    add_ray_options(p)
    max_rate.add_options(p)
    p.add_argument("--tuned", metavar="TUNE_DIR",
                   help="run each backend at its best config from `compare tune` (TUNE_DIR/tune.json)")
    p.set_defaults(func=_run)


def _client_procs(value: str) -> int | None:
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


def _quality_options(args: argparse.Namespace):
    from compare.quality.parity import QualityOptions

    if args.quality_prompts < 1:
        raise UserError(f"--quality-prompts {args.quality_prompts}: give at least 1 (or --quality off)")
    ref = args.quality_reference
    if ref is not None and not Path(ref, "config.json").is_file():
        raise UserError(f"--quality-reference {ref}: no config.json there; pass a local model directory")
    return QualityOptions(mode=args.quality, device=args.quality_device, num_prompts=args.quality_prompts,
                          reference_model=str(Path(ref).resolve()) if ref else None)


def _validate_load(args: argparse.Namespace):
    from compare.workload.schedule import parse_levels

    conc = args.concurrency if (args.concurrency or args.rate) else DEFAULT_LEVELS
    try:
        levels = parse_levels(conc, args.rate)
    except ValueError as e:
        msg = str(e)
        raise UserError(msg if msg.startswith("--") else f"--{msg}") from None  # "rate must be > 0, got nan"
    labels = [lv.label for lv in levels]
    twice = sorted({x for x in labels if labels.count(x) > 1})
    if twice:
        raise UserError(f"load level {', '.join(twice)} is given twice in --concurrency/--rate; give each level once")
    k = getattr(args, "requests_per_stream", None)
    if k is not None:
        if k < 1:
            raise UserError(f"--requests-per-stream {k}: each stream sends at least one request, e.g. "
                            f"--requests-per-stream 4")
        if not any(lv.kind == "concurrency" for lv in levels):
            raise UserError("--requests-per-stream sizes closed-loop levels (--concurrency); an open-loop --rate "
                            "level sends every request")
    if args.warmup < 0:
        raise UserError("--warmup must be >= 0")
    if args.repeats < 1:
        raise UserError("--repeats must be >= 1 (2 or more give confidence intervals)")
    from compare.cli.commands.report import check_price_margin

    check_price_margin(args.gpu_hour_price, args.margin)
    if args.timeout <= 0:
        raise UserError("--timeout must be > 0 seconds")
    from adapters.variants import parse_axes

    parse_axes(args.vary)  # a bad --vary fails before any model is built (compare/running/variants.py plans it)
    if args.require_slo and not args.slo:
        raise UserError("--require-slo checks the run against --slo: give one, e.g. --slo ttft_p95=2s,tpot_p95=100ms")
    return levels


def _requests(args: argparse.Namespace, spec, workload, served=None):
    from compare.workload.build import build_requests, load_sharegpt, request_from_dict

    if args.replay:
        from core.fsutil import read_user_jsonl

        if not Path(args.replay).is_dir():
            raise UserError(f"--replay {args.replay}: not a directory; pass a results directory written by "
                            f"`compare run`")
        path = Path(args.replay) / "workload.jsonl"
        if not path.exists() and not path.is_symlink():
            raise UserError(f"--replay {args.replay}: no workload.jsonl there; pass a results directory")
        fix = "pass a results directory written by `compare run`"
        rows = read_user_jsonl(path, "--replay file", fix)
        try:
            out = [request_from_dict(row) for row in rows]
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise UserError(f"--replay file {path} holds a request that is not one `compare run` wrote "
                            f"({type(e).__name__}: {e}); {fix}") from None
        if not out:
            raise UserError(f"--replay file {path} holds no requests; {fix}")
        return out
    convs = None
    if workload.sharegpt:  # read and checked before the (seconds-long) tokenizer load
        try:
            convs = load_sharegpt(workload.sharegpt)
        except ValueError as e:
            raise UserError(f"workload: {e}") from None
    tokenizer = served.prompt_tokenizer(workload) if served is not None else None
    if (served is None or served.tokenizer) and (workload.prompt_format != "token_ids" or workload.sharegpt):
        try:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(spec.tokenizer or spec.model)
        except Exception as e:  # tokenizer loading raises many types
            raise UserError(f"cannot load the tokenizer of {spec.tokenizer or spec.model} for "
                            f"prompt_format={workload.prompt_format}: {type(e).__name__}; use "
                            f"--prompt-format token_ids or pass --tokenizer DIR") from None
    try:
        return build_requests(workload, tokenizer, convs)
    except ValueError as e:
        raise UserError(f"workload: {e}") from None


def _check_lengths(spec, requests) -> None:
    """A request that cannot fit the context the spec sets would only fail on every engine."""
    limit = spec.max_model_len
    if not limit:
        return
    for r in requests:
        prompt = len(r.prompt_token_ids) if r.prompt_token_ids is not None else 0
        if prompt + r.max_tokens > limit:
            raise UserError(f"request {r.request_id}: prompt ({prompt or '?'} tokens) + max_tokens ({r.max_tokens}) "
                            f"exceed --max-model-len {limit}; shorten --input-len/--output-len or raise "
                            f"--max-model-len")


def _run(args: argparse.Namespace) -> int:
    from core.slo import SLO

    # typed targets: --topology tp=N,replicas=N wraps each backend (backends/topology/target.py)
    backends = apply_topology(args, parse_backends(args.backends))
    levels = _validate_load(args)
    slo = SLO.parse(args.slo)
    after_levels = max_rate.hook(args, slo, args.timeout)  # --find-max-rate (compare/cli/max_rate.py)
    # already running servers only, no --model: the model is what they serve (common.py)
    served, defaults = served_defaults(args)
    if served is None:
        defaults = tiny_defaults(args)
    tiny = served is None and bool(defaults)
    spec = spec_from_args(args, defaults=defaults)
    if spec.native and served is None:  # unknown vLLM / transformers keys, before anything starts
        from compare.cli.native_keys import check_native

        check_native(spec.native, spec.model, backends)
    if served is None and not tiny and "://" not in spec.model and not Path(spec.model).exists() and spec.load_format != "dummy":
        raise UserError(f"model path {spec.model} does not exist; pass a local model directory "
                        f"(no hub downloads here)")
    if served is None:
        # machine-dependent engine defaults (vLLM on CPU needs an explicit KV-cache size), each
        # under its engine's native section: other frameworks keep their own defaults
        from compare.cli.native_keys import native_defaults

        native = native_defaults(spec.native, spec, has_gpu())
        if native != spec.native:
            spec = spec.model_copy(update={"native": native})
    workload = workload_from_args(args, DEFAULT_WORKLOAD if tiny else served.workload_defaults() if served else None)
    requests = _requests(args, spec, workload, served)
    if served is None:
        _check_lengths(spec, requests)
    if args.requests_per_stream is not None:
        from compare.workload.schedule import per_stream

        levels = per_stream(levels, args.requests_per_stream, len(requests))
    if served is not None:
        served.confirm(requests)  # too long for the server: one line; else says where the model comes from
    header = served.header(workload) if served is not None else {}

    from compare.running.runner import RunConfig

    if args.max_errors is not None and args.max_errors < 0:
        raise UserError("--max-errors must be >= 0")
    cfg = RunConfig(backends=backends, spec=spec, workload=workload, requests=requests, levels=levels,
                    slo=slo, warmup=args.warmup, timeout_s=args.timeout, max_errors=args.max_errors,
                    out_root=args.out, repeats=args.repeats, stream_logs=args.verbose, after_levels=after_levels,
                    client_procs=_client_procs(args.client_procs), quality=_quality_options(args),
                    # --ray: the cells as Ray tasks (compare/running/ray_cells.py)
                    scaleout=scaleout_from_args(args), **({"run_id": args.run_id} if args.run_id else {}))
    from compare.cli.killed import settle_root
    from core.results.io import check_results_dir_free

    for note in settle_root(args.out):  # runs killed earlier in this results root: recorded as killed
        print(note, file=sys.stderr)
    check_results_dir_free(args.out, cfg.run_id)  # (a run id whose run never measured may be reused)
    if args.tuned:  # each backend at its best config from `compare tune` (compare/tuning/report.py)
        from compare.tuning.report import tuned_specs

        cfg = replace(cfg, backend_specs={**cfg.backend_specs, **tuned_specs(args.tuned, backends, spec)})
    # validate every backend's spec (pure adapters) before anything is started or written
    from backends.registry import plan
    from compare.running.load import offered_load

    load = offered_load(levels, requests)  # TGI's admission limit follows the run's highest concurrency
    if args.vary:  # each backend's knob variants become the run's columns (compare/running/variants.py)
        from compare.running.variants import vary

        v = vary(backends, cfg.spec_for, args.vary, load)
        cfg = replace(cfg, backends=list(v.targets), backend_specs=dict(v.specs))
        header["variants"] = v.header
        for note in v.notes:
            print(f"note: {note}", file=sys.stderr)
    for b in cfg.backends:
        plan(b, cfg.spec_for(str(b)), load)
    return _execute(cfg, args.format, args.gpu_hour_price, args.margin, quiet=args.quiet, header=header or None,
                    require_slo=args.require_slo)


def _execute(cfg, fmt: str, price: float | None = None, margin: float | None = None, quiet: bool = False,
             header: dict | None = None, require_slo: bool = False) -> int:
    from rich.console import Console

    from backends.logs import terminal
    from compare.report.console import ConsoleProgress, print_summary
    from compare.running.runner import run

    # engines' output goes to RESULTS/logs/ (fd-level redirect while each runs); the console keeps
    # a duplicate of the terminal taken before that
    console = Console(file=terminal(2 if fmt in ("json", "md") else 1))
    if fmt in ("json", "md"):
        # stdout carries the machine-readable output; vLLM logs to stdout unless told otherwise
        # (read when vllm is first imported, i.e. at the first engine start, so setting it here works)
        os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    _remove_orphans(console)
    writer = None
    try:
        with ConsoleProgress(console, quiet=quiet) as progress:
            writer = aio.run(run(cfg, progress, extra_header={
                **(header or {}), **({"gpu_hour_price": price} if price is not None else {})} or None))
    except aio.SignalInterrupt as e:  # one line: what the stop left, and where (compare/running/aio.py)
        e.note = _stopped_note(cfg.out_root / cfg.run_id, e.note)
        raise
    run_data = writer.run
    from compare.analysis.verdict import verdict_json

    if fmt == "json":
        print(json.dumps({**run_data, "verdict": verdict_json(writer.dir, price, margin)}, indent=2, default=str))
    elif fmt in ("md", "html"):
        from compare.cli.commands.report import render

        written = render(writer.dir, fmt == "html", None, price, margin)
        if written:
            console.print(f"report: {written}")
    else:
        print_summary(console, writer.dir, price, margin, quiet=quiet)
    if require_slo:  # exit 1 (SLOMissed) with one line per miss; the results stay written
        from compare.analysis.slo_gate import require_slo_met

        require_slo_met(writer.dir)
    return 0 if run_data["status"] == "complete" else 1


def _stopped_note(d: Path, note: str) -> str:
    """e.g. ``12 requests kept (2 cancelled in flight), run status interrupted; results in DIR``."""
    try:
        status = json.loads((d / "run.json").read_text()).get("status", "?")
        lines = [json.loads(x) for x in (d / "requests.jsonl").read_text().splitlines() if x.strip()]
    except (OSError, ValueError):
        return note or f"nothing was written to {d}"
    cancelled = sum(1 for x in lines if x.get("error_kind") == "cancelled")
    head = f"{note}; " if note else ""
    return (f"{head}{len(lines)} requests kept ({cancelled} cancelled in flight), run status {status}; "
            f"results in {d} (`compare report {d}`)")


def _remove_orphans(console) -> None:
    """Engines or servers that a killed earlier run left behind would skew this run's numbers."""
    from containers.watchdog import orphans, terminate

    found = orphans()
    if found:
        gone = terminate([p for p, _ in found])
        owners = sorted({t for _, t in found})
        console.print(f"removed {len(gone)} process(es) left by dead llm-compare run(s) "
                      f"(owner pid:start {', '.join(owners)})")
