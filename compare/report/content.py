"""The report's text content as neutral sections; markdown.py and html.py only format them."""
from __future__ import annotations

from dataclasses import dataclass, field

from compare.analysis import length_match
from compare.report.console import fmt_stat, matched_note, matched_row
from compare.report.data import ReportData
from compare.report.plots import server_client_rows
from compare.analysis.verdict import DECISION_HEADERS, decision_rows, header_line, summary_lines


@dataclass
class Section:
    title: str
    paragraphs: list[str] = field(default_factory=list)
    bullets: list[str] = field(default_factory=list)
    headers: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)


def _num(v: float | None, fmt: str = "{:.2f}") -> str:
    return "-" if v is None else fmt.format(v)


def sections(d: ReportData) -> list[Section]:
    run, v = d.run, d.verdict
    wl = run.workload
    out = [Section("Run", paragraphs=[
        f"run {run.run_id} ({run.status}), started {run.started_at or '?'}; "
        f"workload {wl.name} (seed {wl.seed}, {wl.num_requests} requests); "
        f"load levels {', '.join(d.levels)}; {run.repeats} repeat(s) per backend; "
        f"model {run.spec.model}"])]
    out.append(Section("Verdict", paragraphs=[header_line(v)], bullets=summary_lines(v),
                       headers=DECISION_HEADERS if v.comparisons else [], rows=decision_rows(v)))
    out.append(Section("Caveats (apply to every number above)",
                       bullets=v.caveats or ["none detected (client kept up, lengths forced, no failures)"]))
    out.append(Section("Quality", bullets=v.quality))
    rows = []
    # lengths not forced: '@k' rows (length-matched) under the raw ones; the verdict's cost is theirs
    lm = run.length_matched or length_match.section(run, d.records)
    lm_run = run.model_copy(update={"length_matched": lm})
    for name in d.backends:
        for label, s in run.backends[name].levels.items():
            cost = v.costs.get(name, {}).get(label)
            rows.append([name, label, f"{s.ok}/{s.requests}", f"{s.output_tok_s:.1f}",
                         fmt_stat(s.ttft_ms, "p50"), fmt_stat(s.ttft_ms, "p95"), fmt_stat(s.tpot_ms, "p50"),
                         fmt_stat(s.tpot_ms, "p95"), fmt_stat(s.itl_ms, "p99"), fmt_stat(s.e2e_ms, "p95"),
                         _num(s.goodput_req_s), "-" if cost is None or lm else f"${cost:.3g}"])
            m = matched_row(lm_run, name, label) if lm else None
            if m is not None and lm is not None:
                ms = lm.levels[label].backends[name]
                rows.append(m[:4] + m[5:] + [_num(ms.goodput_req_s), "-" if cost is None else f"${cost:.3g}"])
    out.append(Section("Measurements (all repeats pooled; latencies in ms, client-side)",
                       paragraphs=[matched_note(lm)] if lm else [],
                       headers=["backend", "load", "ok", "out tok/s", "TTFT p50", "TTFT p95", "TPOT p50",
                                "TPOT p95", "ITL p99", "E2E p95", "goodput req/s", "$/M out tok"], rows=rows))
    sc = server_client_rows(d)
    if sc:
        out.append(Section("Server-side vs client-side TTFT (mean, ms)",
                           paragraphs=["the difference is client/network/API overhead and queueing outside the engine"],
                           headers=["backend", "load", "client", "server", "difference"],
                           rows=[[b, lv, f"{c:.1f}", f"{s:.1f}", f"{c - s:+.1f}"] for b, lv, c, s in sc]))
    env = []
    hw = run.hardware
    env.append(f"CPU {hw.cpu_model} x{hw.cpu_count}; GPUs: "
               + (", ".join(f"{g.get('name')} (driver {g.get('driver')})" for g in hw.gpus) or "none"))
    env.append("packages: " + ", ".join(f"{k} {val}" for k, val in hw.packages.items()))
    for name in d.backends:
        desc = run.backends[name].describe
        env.append(f"{name}: {desc and desc.framework} {desc and desc.version}, "
                   f"quantization {v.quantization.get(name)}")
    out.append(Section("Environment", bullets=env))
    return out
