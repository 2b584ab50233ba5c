"""The decision table: who wins each metric at each load level, by how much, and how sure we are.

Built only from a results directory's data (run.json + requests.jsonl), so old runs can be
re-judged. The first backend is the reference; every other backend is compared with it on the
identical request list (compare/analysis/stats.py). Plain words, no over-claiming: a difference whose
Holm-corrected test is not significant is reported as "no significant difference", and a metric
without enough repeats for an interval is labelled as a point estimate. The caveats of the run
(client lag, output length not forced, failed requests, quantization not verified) are part of
every verdict, never a footnote that can be dropped.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from compare.analysis.length_match import match_run, matched_inputs, section
from core import metrics as metric_registry
from core.records import RequestRecord
from core.results import RunResults, as_run
from core.slo import SLO
from compare.analysis.stats import (
    METRICS, MIN_REPEATS, Comparison, LevelSample, collect, compare_levels, default_metrics, repeat_summaries,
)


@dataclass
class Verdict:
    reference: str
    backends: list[str]
    levels: list[str]
    slo: list[dict[str, Any]]
    quantization: dict[str, str]
    comparisons: list[Comparison]
    costs: dict[str, dict[str, float]] = field(default_factory=dict)  # backend -> level -> $/M out tok
    gpu_hour_price: float | None = None
    devices: dict[str, int] = field(default_factory=dict)  # backend -> devices it occupies (priced each)
    quality: list[str] = field(default_factory=list)
    caveats: list[str] = field(default_factory=list)
    margin: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"reference": self.reference, "backends": self.backends, "levels": self.levels,
                "slo": self.slo, "quantization": self.quantization, "margin": self.margin,
                "gpu_hour_price": self.gpu_hour_price, "cost_per_million_output_tokens": self.costs,
                "devices": self.devices,
                "comparisons": [c.as_dict() for c in self.comparisons],
                "summary": summary_lines(self), "quality": self.quality, "caveats": self.caveats}


# metrics that change when outputs are cut at k (TTFT does not)
_CUT_METRICS = {k for k, m in METRICS.items() if metric_registry.get(m.source).cut_by_length_match}
_CUT_LABELS = ", ".join(m.label for m in metric_registry.REGISTRY if m.cut_by_length_match)


def build_verdict(run: RunResults | dict[str, Any], records: Iterable[RequestRecord], *,
                  gpu_hour_price: float | None = None, margin: float | None = None,
                  metrics: tuple[str, ...] | None = None, seed: int = 0,
                  samples: dict[tuple[str, str], LevelSample] | None = None) -> Verdict:
    """``samples``: raw ones already collected (the report's); replaced by length-matched ones
    when lengths were not forced or differ (compare/analysis/length_match.py)."""
    run = as_run(run)
    records = list(records)
    matched = match_run(run, records)
    judged = run  # the summaries that levels and costs are judged on
    if matched is not None:  # TPOT/E2E/tok/s (and cost) on each request's first k tokens only
        run = run.model_copy(update={"length_matched": run.length_matched or section(run, records, matched)})
        judged, cut = matched_inputs(run, matched)
        samples = collect(judged, cut)
    samples = samples if samples is not None else collect(run, records)
    names = [n for n in run.backends if any(k[0] == n for k in samples)]
    levels = run.level_labels
    ref = names[0] if names else ""
    metrics = metrics or default_metrics(run)
    comps: list[Comparison] = []
    for other in names[1:]:
        for label in levels:
            a, b = samples.get((ref, label)), samples.get((other, label))
            if a is not None and b is not None:
                comps += compare_levels(a, b, metrics, margin=margin, seed=seed)
    v = Verdict(reference=ref, backends=names, levels=levels, slo=[t.model_dump() for t in run.slo],
                quantization={n: _quantization(run, n) for n in names}, comparisons=comps,
                gpu_hour_price=gpu_hour_price, margin=margin)
    if gpu_hour_price is not None:
        v.costs, v.devices = _costs(judged, names, gpu_hour_price)
    v.quality = _quality(run, names, ref)
    v.caveats = verdict_caveats(run, samples)
    if matched:
        for c in comps:
            if c.metric in _CUT_METRICS:
                c.label += " @k"
        v.caveats.insert(0, f"{run.length_matched.reason if run.length_matched else ''}: {_CUT_LABELS} and "
                            f"cost in this verdict are length-matched ('@k': each request's first k tokens, "
                            f"k = fewest any backend streamed; docs/length-matching.md)")
    return v


def _quantization(run: RunResults, name: str) -> str:
    return str(run.spec_for(name).quantization)


def _costs(run: RunResults, names: list[str], price: float) -> tuple[dict[str, dict[str, float]], dict[str, int]]:
    """$ per million output tokens per backend and level, and the devices each backend occupies
    (a topology's every device: compare/analysis/cost.py)."""
    from compare.analysis.cost import cost_per_million, devices

    out: dict[str, dict[str, float]] = {}
    n_dev = {n: devices(n, run.spec_for(n)) for n in names}
    for n in names:
        for label, s in run.backends[n].levels.items():
            c = cost_per_million(price, n_dev[n], s.output_tok_s or 0.0)
            if c is not None:
                out.setdefault(n, {})[label] = c
    return out, n_dev


def _quality(run: RunResults, names: list[str], ref: str) -> list[str]:
    """One line per backend: its quality numbers (deltas vs the reference backend), or whether it
    was skipped, refused or failed and why; then how to switch it (no numbers at all: said first)."""
    entries = {n: run.backends[n].quality for n in names}
    q = {n: d.figures() if d else {} for n, d in entries.items()}
    lines: list[str] = []
    unmeasured: dict[tuple[str, str], list[str]] = {}  # (status, reason) -> backends: one line each
    for n in names:
        d = entries[n]
        if d is not None and d.status != "measured":
            status, reason = d.status, d.reason or "no reason recorded"
            for word in ("skipped: ", "refused: "):
                reason = reason.removeprefix(word)
            unmeasured.setdefault((status, reason), []).append(n)
            continue
        if not q[n]:
            continue
        parts = []
        for k, v in q[n].items():
            if n != ref and k in q.get(ref, {}):
                parts.append(f"{k} {v:.4g} (delta vs {ref} {v - q[ref][k]:+.4g})")
            else:
                parts.append(f"{k} {v:.4g}")
        where = d.reference.device if d is not None and d.reference else None
        against = f" (vs the float32 reference on {where}, scored after the engines stopped)" if where else ""
        lines.append(f"{n}{against}: " + ", ".join(parts))
    statuses = [f"quality {st} for {', '.join(ns)}: {why}" for (st, why), ns in unmeasured.items()]
    if not lines and not statuses:
        lines.append("no quality results in this run: speed only (a faster config may still answer worse)")
    lines += statuses
    if statuses or not any(entries.values()):
        lines.append("--quality on measures every backend against the float32 reference, --quality off skips "
                     "it; auto (default) measures reduced-precision and quantized runs")
    return lines


def verdict_caveats(run: RunResults, samples: dict[tuple[str, str], LevelSample]) -> list[str]:
    from compare.analysis.caveats import caveats
    from compare.analysis.client_health import lag_words

    out = list(caveats(run))
    lagged = []  # every lagging repeat in one caveat: one cause, said once
    for n, entry in run.backends.items():
        for k, levels in repeat_summaries(entry) if entry.repeats else []:
            for label, s in levels.items():
                if s.client_lagged:
                    lagged.append(f"{n} {label} repeat {k + 1}: {lag_words(s)}")
        extra = entry.describe.extra if entry.describe else {}
        if extra.get("quantization_verified") is False:
            out.append(f"{n}: the loaded quantization was not verified to be the requested one")
    if lagged:
        out.append(f"client fell behind in single repeats ({'; '.join(lagged)}): "
                   f"those repeats' latencies are suspect")
    quants = {_quantization(run, n) for n in run.backends}
    if len(quants) > 1:
        out.append("backends run different quantizations: speed differences include the "
                   "quantization, and quality may differ")
    few = sorted({n for (n, _), s in samples.items() if s.n_repeats < MIN_REPEATS})
    if few:
        out.append(f"{', '.join(few)}: fewer than {MIN_REPEATS} repeats, so every difference is a point "
                   f"estimate without a confidence interval (--repeats 3 gives them)")
    return list(dict.fromkeys(out))  # de-duplicated, order kept


# ---------------------------------------------------------------- words


def _fmt(v: float, unit: str) -> str:
    if v is None or not math.isfinite(v):
        return "-"
    return f"{v:.1f}" if unit != "req/s" else f"{v:.2f}"


def change_words(c: Comparison, label: Callable[[str], str] = str) -> str:
    """'vllm 35% lower' / 'vllm 2.4x higher': the better side, by how much, in the metric's sense."""
    r = c.ratio
    if not math.isfinite(r) or r <= 0:
        return "-"
    better = label(c.b if c.b_better else c.a)
    if r == 1:
        return "identical"
    factor = max(r, 1 / r)
    direction = "higher" if c.higher_is_better else "lower"
    if factor >= 2:
        return f"{better} {factor:.1f}x {direction}"
    pct = (factor - 1) * 100 if c.higher_is_better else (1 - 1 / factor) * 100
    return f"{better} {pct:.0f}% {direction}"


def _ci_words(c: Comparison) -> str:
    if c.ci is None:
        return "-"
    lo, hi = ((x - 1) * 100 for x in c.ci)
    return f"{lo:+.0f}%..{hi:+.0f}%"


def decision_cell(c: Comparison, label: Callable[[str], str] = str) -> str:
    if c.ci is None or c.p_value is None:
        # why there is no interval (too few repeats) is a caveat stated once, not in every row
        return f"{change_words(c, label)} (point estimate)"

    if c.significant:
        return f"{change_words(c, label)}"
    text = "no significant difference"
    if c.equivalent:
        text += f"; equivalent within ±{c.margin * 100:.0f}%"
    elif c.noninferior:
        text += f"; {label(c.b)} not worse by more than {c.margin * 100:.0f}%"
    return text


DECISION_HEADERS = ["load", "metric", "A", "B", "B vs A", "95% CI (B/A-1)", "p (Holm)", "verdict"]


def decision_rows(v: Verdict, label: Callable[[str], str] = str) -> list[list[str]]:
    rows = []
    for c in v.comparisons:
        rows.append([c.level, c.label, f"{label(c.a)}: {_fmt(c.a_value, c.unit)}", f"{label(c.b)}: {_fmt(c.b_value, c.unit)}",
                     f"{c.change_pct:+.1f}%" if math.isfinite(c.ratio) else "-", _ci_words(c),
                     "-" if c.p_holm is None else f"{c.p_holm:.3f}", decision_cell(c, label)])
    return rows


def header_line(v: Verdict, name: Callable[[str], str] = str) -> str:
    slo = SLO.from_json(v.slo).describe()
    quant = ", ".join(f"{name(n)}={q}" for n, q in v.quantization.items())
    return f"Verdict (reference {name(v.reference)}; SLO: {slo}; quantization: {quant})"


def summary_lines(v: Verdict, name: Callable[[str], str] = str) -> list[str]:
    """One plain sentence per (backend, level); ``name`` gives the label a backend is shown by."""
    out = []
    if len(v.backends) < 2:
        return ["only one backend measured: nothing to compare"]
    for other in v.backends[1:]:
        for label in v.levels:
            cs = [c for c in v.comparisons if c.b == other and c.level == label]
            if not cs:
                continue
            if all(c.ci is None for c in cs):
                parts = [f"{c.label}: {change_words(c, name)}" for c in cs]
                out.append(f"{label}: {name(other)} vs {name(v.reference)} (point estimates, no CI): "
                           + "; ".join(parts))
                continue
            wins = [c for c in cs if c.significant]
            same = [c.label for c in cs if c.ci is not None and not c.significant]
            text = f"{label}: " + ("; ".join(f"{c.label} {change_words(c, name)}" for c in wins)
                                   if wins else f"no significant difference between {name(other)} and "
                                                f"{name(v.reference)}")
            if wins and same:
                text += f"; no significant difference in {', '.join(same)}"
            out.append(text)
    return out + cost_lines(v, name)


def cost_lines(v: Verdict, name: Callable[[str], str] = str) -> list[str]:
    """One line per backend: its cost per million output tokens at each level, and the devices priced."""
    out = []
    for n, per in v.costs.items():
        costs = ", ".join(f"{lb} ${c:.3g}" for lb, c in per.items())
        d = v.devices.get(n, 1)
        out.append(f"cost per million output tokens at ${v.gpu_hour_price:g}/device-hour, {name(n)} "
                   f"({d} device{'s' if d != 1 else ''}): {costs}")
    return out


# ---------------------------------------------------------------- end of `compare run`


def verdict_from_results(results_dir: Any, price: float | None = None, margin: float | None = None) -> Verdict:
    """Read back what was written (run.json + requests.jsonl): the verdict never uses in-memory state."""
    from core.results import load_results

    run, records = load_results(results_dir)
    price = price if price is not None else run.gpu_hour_price
    return build_verdict(run, records, gpu_hour_price=price, margin=margin)


def verdict_json(results_dir: Any, price: float | None = None, margin: float | None = None) -> dict[str, Any]:
    return verdict_from_results(results_dir, price, margin).as_dict()
