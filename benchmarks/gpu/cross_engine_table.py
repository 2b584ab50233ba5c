"""The cross-engine table from `compare run` results directories (benchmarks/gpu/call_cross_engine.sh).

One row per (engine column, load level): output tok/s, TTFT p50, TPOT p50 and ITL p99 with their
95 % confidence intervals over the repeats (compare/analysis/stats.py ``single_ci``: a t interval
over the repeats' throughput, a bootstrap over repeats and requests for the percentiles), output
tokens per joule of the GPU (mean over repeats), and what the engine was verified to load (the
run's quant_verification; "-" where the engine exposes nothing to verify). Runs anywhere:

    python benchmarks/gpu/cross_engine_table.py RESULTS_DIR [RESULTS_DIR ...] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from compare.analysis.stats import collect, single_ci  # noqa: E402
from core.results import iter_records, load_run  # noqa: E402

METRICS = (("output_tok_s", "out tok/s", "{:,.0f}"), ("ttft_p50", "TTFT p50 ms", "{:.1f}"),
           ("tpot_p50", "TPOT p50 ms", "{:.2f}"), ("itl_p99", "ITL p99 ms", "{:.2f}"))


def _verified(entry: Any) -> str:
    """status: what was loaded (method or dtype, kernel, weight GiB, linear weights vs 16 bits)."""
    v = entry.quant_verification.model_dump() if entry.quant_verification is not None else {}
    if not v:
        return "-"
    lo = v.get("loaded") or {}
    parts = [lo.get("method") or lo.get("dtype")]
    parts += (lo.get("kernels") or [])[:1]
    if lo.get("weight_bytes"):
        parts.append(f"{lo['weight_bytes'] / 2**30:.2f} GiB")
    if lo.get("linear_bits_per_weight") is not None:  # llama.cpp: read from the GGUF's tensors
        parts.append(f"linear {lo['linear_bits_per_weight']:.2f} bits/weight")
    elif lo.get("linear_ratio") is not None:
        parts.append(f"linear x{lo['linear_ratio']:.2f}")
    if not any(parts):  # nothing loaded was reported: the reason is the answer
        return f"{v.get('status', '?')}: {v.get('reason') or 'nothing reported'}"
    return f"{v.get('status', '?')}: " + ", ".join(str(p) for p in parts if p) + (
        f" ({'; '.join(v['problems'])})" if v.get("problems") else "")


def _tok_per_j(entry: Any, label: str) -> float | None:
    vals = []
    for _, levels in entry.repeat_summaries():
        lv = levels.get(label)
        gpu = lv.telemetry.gpu if lv is not None and lv.telemetry is not None else None
        if gpu is not None and gpu.output_tok_per_j:
            vals.append(gpu.output_tok_per_j)
    return sum(vals) / len(vals) if vals else None


def rows(run_dir: Path) -> list[dict[str, Any]]:
    run = load_run(run_dir)
    samples = collect(run, iter_records(run_dir))
    out = []
    order = [lv.label for lv in run.levels]
    for name, entry in run.backends.items():
        for label in order:
            s = samples.get((name, label))
            if s is None:
                continue
            row: dict[str, Any] = {"run": run_dir.name, "backend": name, "level": label, "repeats": s.n_repeats,
                                   "verified": _verified(entry), "out_tok_per_j": _tok_per_j(entry, label)}
            for key, _, _ in METRICS:
                ci = single_ci(s, key)
                row[key] = s.value(key)
                row[key + "_ci"] = list(ci) if ci else None
            out.append(row)
    return out


def _cell(row: dict[str, Any], key: str, fmt: str) -> str:
    v = row[key]
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    ci = row.get(key + "_ci")
    text = fmt.format(v)
    return f"{text} [{fmt.format(ci[0])}, {fmt.format(ci[1])}]" if ci else text


def markdown(all_rows: list[dict[str, Any]]) -> str:
    head = ["run", "engine (scheme)", "load", *(t for _, t, _ in METRICS), "out tok/J", "repeats", "loaded, verified"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in all_rows:
        tpj = f"{r['out_tok_per_j']:.2f}" if r["out_tok_per_j"] else "-"
        lines.append("| " + " | ".join([r["run"], r["backend"], r["level"], *(_cell(r, k, f) for k, _, f in METRICS), tpj,
                                        str(r["repeats"]), r["verified"]]) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    all_rows = [r for d in a.runs for r in rows(d)]
    print(markdown(all_rows))
    if a.json:
        a.json.write_text(json.dumps(all_rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
