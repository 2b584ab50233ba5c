"""The report's plots as PNG bytes (matplotlib, Agg backend: no display needed).

Each function returns None when the data for its plot is absent (e.g. no server metrics), so the
page simply leaves that plot out instead of drawing an empty frame.
"""
from __future__ import annotations

import io
import math
from typing import Any

import numpy as np

from compare.analysis.metrics import itls_ns
from compare.report.data import ReportData, server_ttft_ms
from compare.analysis.stats import METRICS, single_ci
from core.metrics import REGISTRY, latency

# the registry's plotted metrics, each at its first default statistic: TTFT p50, TPOT p50, output tok/s
BAR_METRICS = tuple(m.stat_key(m.default_stats[0] if m.default_stats else None) for m in REGISTRY if m.plotted)


def _plt():
    import matplotlib

    matplotlib.use("Agg")  # files only; never opens a window
    import matplotlib.pyplot as plt

    return plt


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=96, bbox_inches="tight")
    _plt().close(fig)
    return buf.getvalue()


def latency_vs_throughput(d: ReportData) -> bytes | None:
    """One line per backend through its load levels: what latency each throughput costs. One axis
    per plotted latency metric of the registry (TTFT, TPOT) and per further metric the SLO limits
    (ITL, E2E); a limited metric's axis shows the SLO's statistic and the limit as a red line, so
    the answer (the most throughput under the line) is read off the plot."""
    from core.slo import SLO

    plt = _plt()
    terms = {t.metric: t for t in SLO.from_json([t.model_dump() for t in d.run.slo]).terms}
    axes_def = [(m.key, terms[m.key].stat if m.key in terms else "p50") for m in latency()
                if m.plotted or m.key in terms]
    fig, axes = plt.subplots(1, len(axes_def), figsize=(5 * len(axes_def), 4))
    drawn = False
    for name in d.backends:
        pts = []
        for lb, s in d.run.backends[name].levels.items():
            if getattr(s, f"{axes_def[0][0]}_ms") is None:
                continue
            ys = [getattr(s, f"{m}_ms").stat(stat) if getattr(s, f"{m}_ms") else math.nan for m, stat in axes_def]
            pts.append((lb, s.output_tok_s, ys))
        if not pts:
            continue
        drawn = True
        for i, ax in enumerate(axes):
            xs = [p[1] for p in pts]
            ys = [p[2][i] for p in pts]
            ax.plot(xs, ys, marker="o", label=d.label(name), color=_style(d, name, "")["color"])
            for p, y in zip(pts, ys):
                ax.annotate(p[0], (p[1], y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    if not drawn:
        plt.close(fig)
        return None
    for ax, (m, stat) in zip(axes, axes_def):
        if m in terms:
            limit, what = terms[m].limit_ms, f"SLO {_LABEL[m]} {stat} <= {terms[m].limit_ms:g} ms"
            top = max((y for ln in ax.get_lines() for y in ln.get_ydata() if math.isfinite(y)), default=0.0)
            if limit <= 1.5 * top:
                ax.axhline(limit, color="red", linestyle="--", linewidth=1.2, label=what)
            else:  # a line far above every point would squash them flat: the legend says where it is
                ax.plot([], [], color="red", linestyle="--", linewidth=1.2, label=f"{what} (above every point)")
        ax.set_xlabel("output tokens/s")
        ax.set_ylabel(f"{_LABEL[m]} {stat} (ms)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, framealpha=0.85)
    fig.suptitle("latency vs throughput across load levels" + (" (red: the SLO limit)" if terms else ""))
    return _png(fig)


_LABEL = {m.key: m.label for m in REGISTRY}
_STYLES = ("-", "--", ":", "-.")


def _style(d: ReportData, name: str, level: str) -> dict[str, str]:
    """Same colour per backend in every plot; line style tells the load levels apart."""
    b = d.backends.index(name) if name in d.backends else 0
    lv = d.levels.index(level) if level in d.levels else 0
    return {"color": f"C{b % 10}", "linestyle": _STYLES[lv % len(_STYLES)]}


def _cdf(ax: Any, values: np.ndarray, label: str, style: dict[str, str]) -> None:
    v = np.sort(values[np.isfinite(values)])
    if v.size:
        ax.step(v, np.arange(1, v.size + 1) / v.size, where="post", label=label, **style)


def _cells(d: ReportData):
    """(backend, level) in run order: backends as run, levels as listed."""
    return [(n, lv) for n in d.backends for lv in d.levels]


def ttft_cdf(d: ReportData) -> bytes | None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4))
    n = 0
    for name, level in _cells(d):
        s = d.samples.get((name, level))
        vals = s.per_request["ttft"].ravel() if s is not None else np.array([])
        if np.isfinite(vals).any():
            _cdf(ax, vals, f"{d.label(name)} {level}", _style(d, name, level))
            n += 1
    if not n:
        plt.close(fig)
        return None
    ax.set_xlabel("TTFT (ms)")
    ax.set_ylabel("fraction of requests")
    ax.set_title("TTFT CDF (all repeats pooled)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _png(fig)


def itl_cdf(d: ReportData) -> bytes | None:
    plt = _plt()
    groups: dict[tuple[str, str], list[int]] = {}
    for r in d.records:
        if r.ok:
            groups.setdefault((r.backend, r.level), []).extend(itls_ns(r))
    groups = {k: v for k, v in groups.items() if v}
    if not groups:
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    hi = max(float(np.percentile(v, 99.5)) for v in groups.values()) / 1e6
    for name, level in _cells(d):
        if (name, level) in groups:
            _cdf(ax, np.asarray(groups[(name, level)], dtype=float) / 1e6, f"{d.label(name)} {level}",
                 _style(d, name, level))
    ax.set_xlim(0, hi * 1.05 if hi > 0 else 1)
    ax.set_xlabel("inter-token latency (ms; x axis cut at p99.5)")
    ax.set_ylabel("fraction of tokens")
    ax.set_title("ITL CDF (all repeats pooled)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _png(fig)


def bars_with_ci(d: ReportData) -> bytes | None:
    """Per-backend bars per level; error bars are 95% CIs when the run has >= 2 repeats."""
    if not d.samples:
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, len(BAR_METRICS), figsize=(4 * len(BAR_METRICS), 4))
    width = 0.8 / max(1, len(d.backends))
    for ax, metric in zip(axes, BAR_METRICS):
        for i, name in enumerate(d.backends):
            xs, ys, lo, hi = [], [], [], []
            for j, level in enumerate(d.levels):
                s = d.samples.get((name, level))
                if s is None:
                    continue
                v = s.value(metric)
                ci = single_ci(s, metric)
                xs.append(j + i * width)
                ys.append(v)
                lo.append(min(v - ci[0], v) if ci else 0.0)  # bars of rates and times stop at 0
                hi.append(ci[1] - v if ci else 0.0)
            if xs:
                err = np.maximum(np.array([lo, hi], dtype=float), 0.0)
                ax.bar(xs, ys, width, label=d.label(name))
                ax.errorbar(xs, ys, yerr=err, fmt="none", ecolor="black", capsize=3)
        ax.set_xticks([j + width * (len(d.backends) - 1) / 2 for j in range(len(d.levels))], d.levels)
        ax.set_title(f"{METRICS[metric].label} ({METRICS[metric].unit})")
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend()
    few = any(s.n_repeats < 2 for s in d.samples.values())
    fig.suptitle("per backend" + (" (no error bars: fewer than 2 repeats)" if few else ", 95% CI error bars"))
    return _png(fig)


def server_vs_client_ttft(d: ReportData) -> bytes | None:
    """Client TTFT includes queueing in the client, network and API overhead; the server's does not."""
    rows = server_client_rows(d)
    if not rows:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(5, 1.2 * len(rows)), 4))
    x = np.arange(len(rows))
    ax.bar(x - 0.2, [r[2] for r in rows], 0.4, label="client-side (measured here)")
    ax.bar(x + 0.2, [r[3] for r in rows], 0.4, label="server-side (scraped /metrics)")
    ax.set_xticks(x, [f"{d.label(r[0])}\n{r[1]}" for r in rows])
    ax.set_ylabel("mean TTFT (ms)")
    ax.set_title("server-side vs client-side TTFT")
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    return _png(fig)


def server_client_rows(d: ReportData) -> list[tuple[str, str, float, float]]:
    rows = []
    for name in d.backends:
        for level, s in d.run.backends[name].levels.items():
            srv = server_ttft_ms(s.server_metrics)
            cli = s.ttft_ms.mean if s.ttft_ms else None
            if srv is not None and cli is not None:
                rows.append((name, level, float(cli), srv))
    return rows


def time_breakdown(d: ReportData) -> bytes | None:
    """Stacked per backend and level: queued, prefill, decode (the engine's means), a server's
    frontend (its E2E beyond those) and the time outside the engine (client, HTTP, network):
    together the client's mean E2E."""
    rows = [(name, level, s.time_breakdown) for name in d.backends
            for level, s in d.run.backends[name].levels.items()
            if s.time_breakdown is not None and s.time_breakdown.engine_e2e_ms is not None]
    if not rows:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(5, 1.1 * len(rows)), 4))
    x = np.arange(len(rows))
    bottom = np.zeros(len(rows))
    parts = (("queued", "queued_ms"), ("prefill", "prefill_ms"), ("decode", "decode_ms"),
             ("prefill + decode (reported as one)", "inference_ms"),
             ("server frontend (tokenise, IPC)", "frontend_ms"), ("client / network (outside the engine)", "outside_ms"))
    for label, field in parts:
        vals = np.array([max(0.0, getattr(tb, field) or 0.0) for _, _, tb in rows])
        ax.bar(x, vals, 0.6, bottom=bottom, label=label)
        bottom += vals
    ax.set_xticks(x, [f"{d.label(n)}\n{lv}" for n, lv, _ in rows])
    ax.set_ylabel("mean time per request (ms)")
    ax.set_title("where the time goes: queued, prefill, decode, client")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return _png(fig)


def ttft_by_turn(d: ReportData) -> bytes | None:
    """TTFT p50 by turn index: one line per column and level (the HTML report's per-turn plot)."""
    run = d.run
    if not any(s.sessions for b in run.backends.values() for s in b.levels.values()):
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4))
    for n in d.backends:
        for level, s in run.backends[n].levels.items():
            if s.sessions is None:
                continue
            pts = [(t.turn + 1, t.ttft_ms.p50) for t in s.sessions.turns if t.ttft_ms is not None]
            if pts:
                ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=f"{d.label(n)} {level}")
    ax.set_xlabel("turn")
    ax.set_ylabel("TTFT p50 (ms)")
    ax.set_title("TTFT by turn (prompt = conversation so far)")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _png(fig)


PLOTS = (
    ("latency_vs_throughput", "Latency vs throughput", latency_vs_throughput),
    ("ttft_cdf", "TTFT distribution", ttft_cdf),
    ("itl_cdf", "Inter-token latency distribution", itl_cdf),
    ("bars_ci", "Per-backend metrics with confidence intervals", bars_with_ci),
    ("server_vs_client_ttft", "Server-side vs client-side TTFT", server_vs_client_ttft),
    ("time_breakdown", "Where the time goes", time_breakdown),
    ("ttft_by_turn", "TTFT by turn", ttft_by_turn),
)





def all_plots(d: ReportData) -> list[tuple[str, str, bytes]]:
    out = []
    for key, title, fn in PLOTS:
        png = fn(d)
        if png:
            out.append((key, title, png))
    return out
