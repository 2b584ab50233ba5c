"""``compare quant``: the quantization support matrix, and speed + quality per scheme.

* ``compare quant matrix [--device cpu|cuda] [--json] [--cpu-flags FLAGS]``: which (backend,
  scheme) combinations run, how each is expressed natively and which kernel family runs it; on a
  CPU, judged by its instruction sets (this machine's /proc/cpuinfo flags, or FLAGS).
* ``compare quant check --backend B --scheme S``: one cell; exit 2 with the nearest supported
  alternative when unsupported.
* ``compare quant run --model SRC --schemes fp32,w8a8-int8,... [--checkpoint S=DIR ...]``: the same
  workload on vLLM once per scheme, then a table with speed, what was actually loaded, and
  quality parity vs the fp32 transformers reference side by side. ``--dummy`` measures every
  scheme's speed with random weights (config injection), and refuses quality numbers.
* ``compare quant quality``: held-out perplexity, token agreement and divergence per engine (vLLM,
  OpenVINO) and scheme vs the fp32 transformers reference, on the trained tiny model by default
  (compare/cli/commands/quant_quality.py).
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from adapters.quant_matrix import BACKENDS  # the quantization table's columns
from compare.cli.commands.quant_options import (
    CheckOptions, MachineOptions, MatrixOptions, QuantRunOptions,
)
from compare.cli.model_args import add_options
from compare.running import aio

if TYPE_CHECKING:
    from core.results import RunResults
from core.errors import UserError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("quant", help="quantization matrix; speed and quality per scheme")
    qs = p.add_subparsers(dest="quant_cmd", metavar="WHAT", required=True)
    m = qs.add_parser("matrix", help="which backend runs which scheme, with which kernel family")
    add_options(m, MatrixOptions)  # each command's options, defaults, checks and help: quant_options.py
    m.set_defaults(func=lambda args: _matrix(MatrixOptions.of(args)))
    c = qs.add_parser("check", help="is one (backend, scheme) supported here? exit 2 if not")
    add_options(c, CheckOptions)
    c.set_defaults(func=lambda args: _check(CheckOptions.of(args)))
    r = qs.add_parser("run", help="vLLM once per scheme: speed, loaded kernels, quality side by side")
    add_options(r, QuantRunOptions)
    r.set_defaults(func=lambda args: _run(QuantRunOptions.of(args)))
    from compare.cli.commands.quant_quality import add_quality_parser

    add_quality_parser(qs)


def _machine(o: MachineOptions) -> Any:
    """This machine as probed (device, CPU flags), or as --device / --cpu-flags say."""
    from adapters.target import Machine
    from backends.models.probe import probe_machine

    m = probe_machine()
    if o.device in (None, m.device) and o.cpu_flags is None:
        return m
    flags = frozenset(o.cpu_flags.split()) if o.cpu_flags is not None else m.cpu_flags
    return Machine(o.device or m.device, cpu_flags=flags)


def matrix_rows(device: Any) -> list[dict[str, Any]]:
    """Every scheme's cell per backend on ``device`` ("cpu" | "cuda", or a probed Machine)."""
    from adapters.quant import MATRIX_NAMES, SCHEMES, cell

    rows = []
    for s in MATRIX_NAMES:
        row: dict[str, Any] = {"scheme": s, "summary": SCHEMES[s].summary}
        for b in BACKENDS:
            row[b] = cell(b, s, device).as_dict()
        rows.append(row)
    return rows


def _matrix(o: MatrixOptions) -> int:
    from core.hardware import isa_summary

    machine = _machine(o)
    device = machine.device
    rows = matrix_rows(machine)
    cpu = isa_summary(machine.cpu_flags) if device == "cpu" and machine.cpu_flags is not None else None
    if o.as_json:
        print(json.dumps({"device": device, **({"cpu_isa": cpu} if cpu else {}), "rows": rows}, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    where = f"{device}, CPU: {cpu}" if cpu else device
    t = Table(title=f"quantization support on {where} (kernel family; '-' = unsupported, nearest in brackets)")
    t.add_column("scheme")
    for b in BACKENDS:
        t.add_column(b)
    for r in rows:
        cells = []
        for b in BACKENDS:
            c = r[b]
            cells.append(f"{c.get('kernel', '')}\n{c.get('how', '')}" if c["supported"]
                         else f"- [{c.get('alternative') or 'none'}]\n{c.get('reason', '')}")
        t.add_row(r["scheme"], *cells)
    Console(width=200).print(t)
    return 0


def _check(o: CheckOptions) -> int:
    from adapters.quant import check

    c = check(o.backend, o.scheme, _machine(o))  # raises -> exit 2
    print(json.dumps({"backend": o.backend, "scheme": o.scheme, **c.as_dict()}))
    return 0


# ---------------------------------------------------------------- compare quant run

@dataclass
class _Variant:
    label: str
    scheme: str
    spec: Any


def variants(o: QuantRunOptions, base: Any) -> list[_Variant]:
    """One spec per requested scheme for the engine with the "quant" role (vLLM); bad combinations
    raise before anything starts."""
    from adapters.quant import SCHEMES, check
    from backends import registry
    from backends.models.probe import probe_machine

    engine = registry.with_role("quant").name

    ckpts: dict[str, str] = {}
    for item in o.checkpoint:
        s, eq, d = item.partition("=")
        if not eq or s not in SCHEMES:
            raise UserError(f"--checkpoint {item!r}: expected SCHEME=DIR with SCHEME one of "
                            f"{', '.join(n for n in SCHEMES if SCHEMES[n].kind == 'weights')}")
        if not Path(d, "config.json").is_file():
            raise UserError(f"--checkpoint {item}: {d}/config.json not found; make one with "
                            f"compare quantize --model {base.model} --scheme {s} --out {d}")
        ckpts[s] = d
    out = []
    machine = probe_machine()
    for s in [x.strip() for x in o.schemes.split(",") if x.strip()]:
        if s not in SCHEMES or s == "auto":
            raise UserError(f"--schemes: unknown scheme {s!r}; see `compare quant matrix`")
        sch = SCHEMES[s]
        upd: dict[str, Any] = dict(sch.spec_update)
        if sch.kind == "weights":
            c = check(engine, s, machine)  # not on this device or CPU (instruction set): exit 2 now
            if o.dummy:
                upd["load_format"] = "dummy"
            elif s in ckpts:
                upd["model"] = ckpts[s]
            elif not c.online:
                raise UserError(f"--schemes {s}: {engine} cannot quantize to {s} at load time; pass "
                                f"--checkpoint {s}=DIR (compare quantize --model {base.model} --scheme {s} --out DIR)")
        elif o.dummy:
            upd["load_format"] = "dummy"
        out.append(_Variant(f"{engine}:{s}", s, base.model_copy(update=upd)))
    if not out:
        raise UserError("--schemes is empty: name at least one, e.g. fp32,w8a8-int8")
    return out


def _run(o: QuantRunOptions) -> int:
    from dataclasses import replace

    from backends import registry
    from backends.models.probe import probe_machine
    from compare.cli.options import build_workload, spec_of
    from compare.quality.parity import QualityOptions, load_accuracy_jsonl
    from compare.running.runner import run
    from compare.workload.schedule import parse_levels
    from compare.workload.build import build_requests

    if o.format == "json":  # vLLM logs to stdout by default; keep stdout pure JSON
        import os

        os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    if o.spec_quantization is not None:
        raise UserError("compare quant run takes the schemes from --schemes, not --quantization")
    if o.dummy and o.accuracy:
        raise UserError("--accuracy with --dummy: quality numbers are refused for dummy-weight runs")
    base = spec_of(o)
    if not Path(base.model, "config.json").is_file():
        raise UserError(f"--model {base.model}: no config.json there; pass a local model directory")
    if base.kv_cache_memory_bytes is None and base.gpu_memory_utilization is None:
        from compare.cli.defaults import has_gpu

        if not has_gpu():  # vLLM on CPU refuses to start without an explicit KV-cache size
            base = base.model_copy(update={"kv_cache_memory_bytes": 256 * 2**20})
    vs = variants(o, base)
    machine = probe_machine()
    # each variant's plan once: UnsupportedSpecError (exit 2) before any engine starts
    engine = registry.with_role("quant").name
    prepared = {v.label: replace(registry.prepare(engine, v.spec, machine), name=v.label) for v in vs}
    acc = load_accuracy_jsonl(o.accuracy) if o.accuracy else ()
    try:
        levels = parse_levels(o.concurrency, None)
    except ValueError as e:
        raise UserError(str(e)) from None
    workload = build_workload(o, {"name": "quant", "num_requests": 16, "input": {"dist": "fixed", "value": 64},
                                         "output": {"dist": "fixed", "value": 32}})
    requests = build_requests(workload)
    opts = QualityOptions(mode="on", num_prompts=o.quality_prompts, max_tokens=o.quality_tokens,
                          reference_model=str(Path(base.model).resolve()), accuracy=acc,
                          device=o.quality_device)
    from compare.running.runner import RunConfig

    cfg = RunConfig(backends=[v.label for v in vs], spec=base, workload=workload, requests=requests,
                         levels=levels, warmup=o.warmup, timeout_s=o.timeout, out_root=o.out,
                         backend_specs={v.label: v.spec for v in vs}, quality=opts,
                         **({"run_id": o.run_id} if o.run_id else {}))

    def factory(name: str, spec: Any) -> Any:
        return prepared[name].build()

    writer = aio.run(run(cfg, backend_factory=factory))
    table = side_by_side(writer.results, [v.label for v in vs])
    from core.fsutil import write_json_atomic

    write_json_atomic(writer.dir / "quant.json", table)
    if o.format == "json":
        print(json.dumps(table, indent=2))
    else:
        _print(table)
        print(f"results: {writer.dir}", file=sys.stderr)
    return 0 if writer.run["status"] == "complete" and all(r["valid"] is not False for r in table["rows"]) else 1


def side_by_side(run: RunResults, labels: list[str]) -> dict[str, Any]:
    """Speed, verification and quality per scheme, with speedups vs the first scheme."""
    rows = []
    for label in labels:
        b = run.backends.get(label)
        lv = list(b.levels.values()) if b else []
        last = lv[-1] if lv else None
        q = b.quality if b else None
        v = b.quant_verification if b else None
        loaded = (v.loaded if v else None) or {}  # as the engine reported it: engine-specific keys
        acc = q.accuracy if q else None
        rows.append({
            "scheme": label.split(":", 1)[1], "status": b.status if b else None, "valid": v.valid if v else None,
            "problems": v.problems if v else [], "method": loaded.get("method"), "kernels": loaded.get("kernels", []),
            "linear_ratio": loaded.get("linear_ratio"), "weight_bytes": loaded.get("weight_bytes"),
            "start_s": b.start_s if b else None, "output_tok_s": last.output_tok_s if last else None,
            "ttft_p50_ms": last.ttft_ms.p50 if last and last.ttft_ms else None,
            "tpot_p50_ms": last.tpot_ms.p50 if last and last.tpot_ms else None,
            "quality_status": q.status if q else None, "quality_reason": q.reason if q else None,
            "token_agreement": q.token_agreement if q else None,
            "mean_first_divergence": q.mean_first_divergence if q else None,
            "mean_abs_logprob_diff": q.mean_abs_logprob_diff if q else None, "kl_topk": q.kl_topk if q else None,
            "accuracy": acc.accuracy if acc else None, "accuracy_p": acc.mcnemar_p if acc else None,
        })
    base = rows[0]["output_tok_s"] if rows and rows[0]["output_tok_s"] else None
    for r in rows:
        r["speedup"] = round(r["output_tok_s"] / base, 3) if base and r["output_tok_s"] else None
    return {"run_id": run.run_id, "baseline": rows[0]["scheme"] if rows else None, "rows": rows}


def _fmt(x: Any, nd: int = 3) -> str:
    return "-" if x is None else f"{x:.{nd}f}" if isinstance(x, float) else str(x)


def _print(table: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"speed and quality per scheme (baseline {table['baseline']}; quality vs fp32 transformers)")
    for c in ("scheme", "loaded", "kernel", "w-ratio", "tok/s", "speedup", "TTFT p50", "agree", "1st div",
              "|dlogp|", "KL top-k", "acc"):
        t.add_column(c)
    for r in table["rows"]:
        loaded = "VALID" if r["valid"] else "INVALID: " + "; ".join(r["problems"]) if r["valid"] is False else "?"
        qual = r["quality_status"] != "measured"
        t.add_row(r["scheme"], loaded, ", ".join(r["kernels"]) or "-", _fmt(r["linear_ratio"], 2),
                  _fmt(r["output_tok_s"], 1), _fmt(r["speedup"], 2), _fmt(r["ttft_p50_ms"], 1),
                  r["quality_status"] if qual else _fmt(r["token_agreement"]), _fmt(r["mean_first_divergence"], 1),
                  _fmt(r["mean_abs_logprob_diff"], 4), _fmt(r["kl_topk"], 5), _fmt(r["accuracy"]))
    Console(width=220).print(t)
