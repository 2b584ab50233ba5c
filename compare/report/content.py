"""The report's text content as neutral sections; markdown.py and html.py only format them.

Order (the console follows it too): the answer (one headline per SLO, or throughput and latency),
the plot that shows it, the caveats once, then the details. Long backend names appear as short
labels with a legend (compare/report/labels.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from compare.analysis import length_match
from compare.analysis.headline import headlines
from core.metrics import get
from compare.report.console import fmt_stat, latency_columns, matched_note, matched_row
from compare.report.data import ReportData
from compare.report.labels import legend
from compare.report.plots import server_client_rows
from compare.analysis.verdict import DECISION_HEADERS, decision_rows, header_line, summary_lines


@dataclass
class Section:
    title: str
    paragraphs: list[str] = field(default_factory=list)
    bullets: list[str] = field(default_factory=list)
    headers: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    plots: list[str] = field(default_factory=list)  # keys of compare/report/plots.py PLOTS, HTML only
    kind: str = ""  # "answer", "caveats": a style hook for the HTML


def _num(v: float | None, fmt: str = "{:.2f}") -> str:
    return "-" if v is None else fmt.format(v)


def sections(d: ReportData) -> list[Section]:
    run, v = d.run, d.verdict
    wl = run.workload
    name = d.label
    about = [f"{', '.join(name(n) for n in d.backends)} on {wl.num_requests} requests "
             f"(workload {wl.name}, seed {wl.seed}) at load {', '.join(d.levels)}; {run.repeats} repeat(s); "
             f"run {run.run_id} ({run.status})"]
    if legend(d.labels):
        about.append("labels: " + "; ".join(legend(d.labels)))
    from compare.report import max_rate  # --find-max-rate: its answer beside the others, its probes below

    out = [Section("Answer", kind="answer", bullets=headlines(run, v, name) + max_rate.answer_lines(run, name),
                   paragraphs=about)]
    out.append(Section("Latency vs throughput", plots=["latency_vs_throughput"], kind="answer-plot"))
    out.append(Section("Caveats (apply to every number in this report)", kind="caveats",
                       bullets=v.caveats or ["none detected (client kept up, lengths forced, no failures)"]))
    rows = []
    # lengths not forced: '@k' rows (length-matched) under the raw ones; the verdict's cost is theirs
    lm = run.length_matched or length_match.section(run, d.records)
    lm_run = run.model_copy(update={"length_matched": lm})
    lat = latency_columns(run)  # from the metric registry, with the SLO's statistics
    for n in d.backends:
        for label, s in run.backends[n].levels.items():
            cost = v.costs.get(n, {}).get(label)
            rows.append([name(n), label, f"{s.ok}/{s.requests}", f"{s.output_tok_s:.1f}",
                         *(fmt_stat(getattr(s, get(metric).summary_key), st) for _, metric, st, _, _ in lat),
                         _num(s.goodput_req_s), "-" if cost is None or lm else f"${cost:.3g}"])
            m = matched_row(lm_run, n, label) if lm else None
            if m is not None and lm is not None:
                ms = lm.levels[label].backends[n]
                rows.append([name(n)] + m[1:4] + m[5:] + [_num(ms.goodput_req_s),
                                                          "-" if cost is None else f"${cost:.3g}"])
    out.append(Section("Measurements (all repeats pooled; latencies in ms, client-side)",
                       paragraphs=[matched_note(lm)] if lm else [],
                       headers=["backend", "load", "ok", "out tok/s", *(head.replace("\n", " ") for *_, head, _ in lat),
                                "goodput req/s", "$/M out tok"], rows=rows))
    from compare.report import turns  # multi-turn sessions: TTFT by turn per column

    if turns.has_sessions(run):
        out.append(Section("Multi-turn sessions: TTFT by turn", paragraphs=[turns.MEANING],
                           headers=turns.headers(run, d.backends, name), rows=turns.rows(run, d.backends),
                           plots=["ttft_by_turn"]))
    out.append(Section("Verdict per metric", paragraphs=[header_line(v, name)], bullets=summary_lines(v, name),
                       headers=DECISION_HEADERS if v.comparisons else [], rows=decision_rows(v, name)))
    if max_rate.probe_rows(run, name):
        out.append(Section("Max rate meeting the SLO: every probe", paragraphs=[max_rate.MEANING],
                           headers=max_rate.HEADERS, rows=max_rate.probe_rows(run, name)))
    out.append(Section("Quality", bullets=v.quality))
    sc = server_client_rows(d)
    if sc:
        out.append(Section("Server-side vs client-side TTFT (mean, ms)",
                           paragraphs=["the difference is client/network/API overhead and queueing outside the engine"],
                           headers=["backend", "load", "client", "server", "difference"],
                           rows=[[name(b), lv, f"{c:.1f}", f"{s:.1f}", f"{c - s:+.1f}"] for b, lv, c, s in sc]))
    from compare.analysis import bottleneck  # CPU per process and GPUs per level (backends/telemetry.py)

    if bottleneck.cpu_rows(run, name):
        out.append(Section("Who is busy: CPU per process (% of one core)", paragraphs=[bottleneck.CPU_MEANING],
                           headers=bottleneck.CPU_HEADERS, rows=bottleneck.cpu_rows(run, name)))
    if bottleneck.gpu_rows(run, name) or bottleneck.gpu_note(run):
        out.append(Section("GPUs (NVML)", paragraphs=[bottleneck.gpu_note(run) or bottleneck.GPU_MEANING],
                           headers=bottleneck.GPU_HEADERS if bottleneck.gpu_rows(run, name) else [],
                           rows=bottleneck.gpu_rows(run, name)))
    if bottleneck.gpu_process_rows(run, name):
        out.append(Section("GPU memory by process (NVML)", headers=bottleneck.GPU_PROCESS_HEADERS,
                           rows=bottleneck.gpu_process_rows(run, name)))
    from compare.report import server_side

    bd = server_side.breakdown_rows(run, d.backends, name)
    if bd:
        out.append(Section("Where the time goes", paragraphs=[server_side.BREAKDOWN_NOTE],
                           headers=server_side.BREAKDOWN_HEADERS, rows=bd, plots=["time_breakdown"]))
    hr = server_side.histogram_rows(run, d.backends, name)
    if hr:
        out.append(Section("Server-side histograms (ms)", paragraphs=[server_side.HIST_NOTE],
                           headers=server_side.HIST_HEADERS, rows=hr))
    out.append(Section("Distributions", plots=["ttft_cdf", "itl_cdf", "bars_ci", "server_vs_client_ttft"]))
    env = []
    hw = run.hardware
    env.append(f"CPU {hw.cpu_model} x{hw.cpu_count}; GPUs: "
               + (", ".join(f"{g.name} (driver {g.driver})" for g in hw.gpus) or "none"))
    env.append("packages: " + ", ".join(f"{k} {val}" for k, val in hw.packages.items()))
    for n in d.backends:
        desc = run.backends[n].describe
        env.append(f"{name(n)}: {desc and desc.framework} {desc and desc.version}, "
                   f"quantization {v.quantization.get(n)}")
    out.append(Section("Environment", bullets=env))
    return out
