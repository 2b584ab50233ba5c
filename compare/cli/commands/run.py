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
from compare.cli.model_args import add_options
from compare.cli.request import Output, RunRequest, run_request
from compare.cli.run_options import RUN_GROUPS, RunOptions
from compare.running import aio
from core.errors import UserError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run the workload on each backend and compare (default command)")
    add_options(p, RunOptions, RUN_GROUPS)  # every option, its default, check and help: compare/cli/run_options.py
    p.set_defaults(func=_run)


def _replayed(replay: str):
    """``--replay RESULTS_DIR``: the earlier run's requests and, for a trace run, the trace's send
    offsets (compare/workload/clock.py; None otherwise). Every line is checked against the request's
    typed shape (one line naming the line and the field), and request ids must be unique (records
    are matched to requests by id)."""
    from compare.workload.build import request_from_dict
    from compare.workload.clock import split_clock
    from core.fsutil import parse_user_json, read_user_text
    from core.shape import ShapeError

    if not Path(replay).is_dir():
        raise UserError(f"--replay {replay}: not a directory; pass a results directory written by "
                        f"`compare run`")
    path = Path(replay) / "workload.jsonl"
    if not path.exists() and not path.is_symlink():
        raise UserError(f"--replay {replay}: no workload.jsonl there; pass a results directory")
    fix = "pass a results directory written by `compare run`"
    text = read_user_text(path, "--replay file", fix)
    rows, lines = [], []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        row = parse_user_json(line, path, "--replay file", fix, line=n)
        if not isinstance(row, dict):  # the typed check names what belongs there
            try:
                request_from_dict(row)
            except ShapeError as e:
                raise UserError(f"--replay file {path} line {n}: {e}; {fix}") from None
        rows.append(row)
        lines.append(n)
    try:
        rows, clock = split_clock(rows, f"--replay file {path}")
    except ValueError as e:
        raise UserError(str(e)) from None
    out, seen = [], {}
    for n, row in zip(lines, rows):
        try:
            out.append(request_from_dict(row))
        except ShapeError as e:
            raise UserError(f"--replay file {path} line {n}: {e}; {fix}") from None
        rid = out[-1].request_id
        if rid in seen:
            raise UserError(f"--replay file {path} line {n}: request_id {rid!r} is given twice (also line "
                            f"{seen[rid]}); {fix}")
        seen[rid] = n
    if not out:
        raise UserError(f"--replay file {path} holds no requests; {fix}")
    return out, clock


def _requests(replay: str | None, spec, workload, served=None):
    """The run's requests: those of an earlier run (``--replay RESULTS_DIR``), else the workload's."""
    from compare.workload.build import build_requests, load_sharegpt

    if replay:
        return _replayed(replay)[0]
    convs = None
    if workload.sharegpt:  # read and checked before the (seconds-long) tokenizer load
        try:
            convs = load_sharegpt(workload.sharegpt)
        except ValueError as e:
            raise UserError(f"workload: {e}") from None
    if workload.sessions is not None and workload.sessions.sharegpt:  # (also before the tokenizer load)
        from compare.workload.sessions import load_conversations

        try:
            convs = load_conversations(workload.sessions.sharegpt)
        except ValueError as e:
            raise UserError(str(e)) from None
    tokenizer = served.prompt_tokenizer(workload) if served is not None else None
    shared = workload.sharegpt or (workload.sessions is not None and workload.sessions.sharegpt)
    if (served is None or served.tokenizer) and (workload.prompt_format != "token_ids" or shared):
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


def _dataset(dataset: tuple[str, str | None], workload):
    """``--dataset FILE``: every prompt of the file, with the workload's output
    length where a row gives none."""
    from compare.workload.datasets import DatasetError, load_dataset, parse_columns

    path, columns = dataset
    default_out = workload.output.value or int(workload.output.mean or 32)
    try:
        return load_dataset(path, columns=parse_columns(columns), default_output_len=default_out,
                            ignore_eos=workload.ignore_eos, seed=workload.seed)
    except DatasetError as e:
        raise UserError(str(e)) from None


def _trace_levels(opts: dict, seed: int):
    """``--trace FILE``: the trace's requests, sent in one open-loop level at the trace's offsets."""
    from compare.workload.clock import trace_level
    from compare.workload.traces import TraceError, build_trace, parse_window

    try:
        trace = build_trace(opts["path"], opts["fmt"], speedup=opts["speedup"],
                            window=parse_window(opts["window"]), cap=opts["cap"], seed=seed)
    except TraceError as e:
        raise UserError(str(e)) from None
    return trace.requests, [trace_level(trace.offsets_ns)]


def _check_sessions(r: RunRequest, requests) -> None:
    """Multi-turn sessions: what cannot send them, refused in one line rather than bypassed."""
    from compare.workload.sessions import is_sessions

    if not is_sessions(requests):
        return
    # a turn waits on the reply before it, so one process holds a whole session (compare/running/sessions.py)
    if r.client_procs not in (None, 1):
        raise UserError(f"--client-procs {r.client_procs}: multi-turn sessions are sent by one client process "
                        f"(each turn waits on the reply before it); use --client-procs 1 or auto")
    if r.scaleout is not None and getattr(r.scaleout, "load_shards", 0):
        raise UserError("--ray-load-shards: multi-turn sessions are sent by one client process (each turn waits "
                        "on the reply before it); leave --ray-load-shards out")
    if any(lv.duration_s is not None for lv in r.levels):
        raise UserError("--duration bounds lists of single requests; a sessions workload's level is bounded by its "
                        "sessions: drop --duration and set sessions.num_sessions")


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
    return execute(run_request(args))


def execute(r: RunRequest) -> int:
    """Build the requests, plan every backend (nothing started yet), then run and report."""
    after_levels = max_rate.hook(r.max_rate, r.slo, r.timeout_s)  # --find-max-rate (compare/cli/max_rate.py)
    if sum(x is not None for x in (r.trace, r.dataset, r.replay)) > 1:
        raise UserError("--trace, --dataset and --replay each give the request list; pass one of them")
    clock = None
    if r.replay:  # a replayed trace run keeps the trace's send offsets (compare/workload/clock.py)
        requests, clock = _replayed(r.replay)
    else:
        requests = _dataset(r.dataset, r.workload) if r.dataset else _requests(None, r.spec, r.workload, r.served)
    if r.served is None:
        _check_lengths(r.spec, requests)
    levels = list(r.levels)
    if clock is not None and not r.levels_given:
        from compare.workload.clock import trace_level

        levels = [trace_level(clock)]
    elif clock is not None:
        print(f"note: --replay {r.replay} was a trace run; its requests are sent at --concurrency/--rate "
              f"instead of the trace's clock (leave both out to keep it)", file=sys.stderr)
    if r.trace is not None:
        requests, levels = _trace_levels(r.trace, r.workload.seed)
    _check_sessions(r, requests)
    if r.requests_per_stream is not None:
        from compare.workload.schedule import per_stream

        levels = per_stream(levels, r.requests_per_stream, len(requests))
    if r.served is not None:
        r.served.confirm(requests)  # too long for the server: one line; else says where the model comes from
    header = r.served.header(r.workload) if r.served is not None else {}

    from compare.running.runner import RunConfig

    backends = list(r.targets)
    cfg = RunConfig(backends=backends, spec=r.spec, workload=r.workload, requests=requests, levels=levels,
                    slo=r.slo, warmup=r.warmup, timeout_s=r.timeout_s, max_errors=r.max_errors,
                    out_root=r.out, repeats=r.repeats, stream_logs=r.verbose, after_levels=after_levels,
                    client_procs=r.client_procs, quality=r.quality, scaleout=r.scaleout,
                    **({"run_id": r.run_id} if r.run_id else {}))
    from compare.cli.killed import settle_root
    from core.results.io import check_results_dir_free

    for note in settle_root(r.out):  # runs killed earlier in this results root: recorded as killed
        print(note, file=sys.stderr)
    check_results_dir_free(r.out, cfg.run_id)  # (a run id whose run never measured may be reused)
    if r.tuned:  # each backend at its best config from `compare tune` (compare/tuning/report.py)
        from compare.tuning.report import tuned_specs

        cfg = replace(cfg, backend_specs={**cfg.backend_specs, **tuned_specs(r.tuned, backends, r.spec)})
    # validate every backend's spec (pure adapters) before anything is started or written; the
    # run builds its engines from these same plans (the machine and each model probed once)
    from backends.registry import Builder
    from compare.running.load import offered_load

    builder = Builder(offered_load(levels, requests))  # TGI's admission limit follows the run's highest concurrency
    if r.vary:  # each backend's knob variants become the run's columns (compare/running/variants.py)
        from compare.running.variants import vary

        v = vary(backends, cfg.spec_for, r.vary, builder=builder)
        cfg = replace(cfg, backends=list(v.targets), backend_specs=dict(v.specs))
        header["variants"] = v.header
        for note in v.notes:
            print(f"note: {note}", file=sys.stderr)
    for b in cfg.backends:
        builder.prepare(b, cfg.spec_for(str(b))).plan()
    return _execute(cfg, r.output, builder, header=header or None)


def _execute(cfg, output: Output, builder, header: dict | None = None) -> int:
    from rich.console import Console

    from backends.logs import terminal
    from compare.report.console import ConsoleProgress, print_summary
    from compare.running.runner import run

    fmt, price, margin, quiet = output.format, output.price, output.margin, output.quiet
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
            writer = aio.run(run(cfg, progress, backend_factory=builder, extra_header={
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
    if output.require_slo:  # exit 1 (SLOMissed) with one line per miss; the results stay written
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
