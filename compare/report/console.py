"""Console output: one live status line while running, one summary line per finished level, and
at the end the answer, a table that fits the terminal, the caveats once and the results path.

Engines' own output never reaches the console: the runner files it under ``<results>/logs/``
(backends/logs.py), and this console writes to a duplicate of the terminal taken before that.
"""
from __future__ import annotations

import re
import textwrap
import time
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from backends.logs import error_tail, tail
from core.metrics import SLO_STATS, get, latency
from core.records import RequestRecord
from core.results import Dist, LengthMatched, LevelSummary, MatchedSummary, RunResults, as_run
from compare.report.labels import legend, short_labels
from compare.running.runner import Progress
from compare.workload.schedule import LoadLevel

_SPIN = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


class ConsoleProgress(Progress):
    """Live status (terminals only) covering every phase; persistent lines only for what finished.
    A context manager: leaving it stops the live line."""

    def __init__(self, console: Console, quiet: bool = False) -> None:
        self.console, self.quiet = console, quiet
        self._live: Live | None = None
        self._name, self._what, self._log = "", "", None  # type: tuple[str, str, Path | None]
        self._t0 = self._phase_t0 = time.monotonic()
        self._done = self._total = 0

    def __enter__(self) -> "ConsoleProgress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- runner callbacks

    def backend_start(self, name: str) -> None:
        self._name, self._t0 = name, time.monotonic()
        if self._live is None and self.console.is_terminal and not self.quiet:
            self._live = Live(_Status(self), console=self.console, transient=True, refresh_per_second=8)
            self._live.start()

    def phase(self, name: str, what: str, log: Path | None = None) -> None:
        if what == "warm-up" and self._what == "starting":
            self._say(f"▶ {self._name}: started in {time.monotonic() - self._phase_t0:.1f} s")
        self._what, self._log, self._phase_t0 = what, log, time.monotonic()

    def level_start(self, name: str, level: LoadLevel, n: int) -> None:
        self._what, self._phase_t0 = level.label, time.monotonic()
        self._done, self._total = 0, n

    def request_done(self, rec: RequestRecord) -> None:
        self._done += 1

    def level_done(self, name: str, level: LoadLevel, summary: LevelSummary) -> None:
        ttft = summary.ttft_ms.p50 if summary.ttft_ms else None
        procs = f" ({summary.client_procs.n} client procs)" if summary.client_procs else ""
        self._say(f"  {self._name} {level.label}{procs}: {summary.ok}/{summary.requests} ok, "
                  f"{summary.output_tok_s:.1f} tok/s, TTFT p50 {'-' if ttft is None else f'{ttft:.1f} ms'}, "
                  f"{time.monotonic() - self._phase_t0:.1f} s")
        from compare.analysis.bottleneck import console_line  # CPU/GPU telemetry: who is saturated

        flags = console_line(summary)
        if flags:
            self._say(f"    ! {flags}")
        if summary.coordinated_omission and summary.send_delay_ms:  # the client held back load
            d = summary.send_delay_ms
            self._say(f"    ! requests left late: send delay p50 {d.p50:.1f} / p99 {d.p99:.1f} / max {d.max:.1f} ms "
                      f"(coordinated omission; latencies count from the send)")

    def note(self, name: str, text: str) -> None:
        self._say(text)

    def log_line(self, name: str, line: str) -> None:
        self.console.print(Text(f"{name}| {line}", style="dim"), no_wrap=True, overflow="ellipsis")

    def message(self, text: str) -> None:
        if not self.quiet:
            self.console.print(f"[yellow]{escape(text)}[/yellow]")

    def backend_failed(self, name: str, error: str, log: Path | None) -> None:
        # shown even with --quiet: a backend missing from the verdict needs its reason next to it
        self.console.print(f"[red]✗ {escape(name)} failed:[/red] {escape(error)}")
        lines = error_tail(log, 6)
        if lines:
            self.console.print(f"  last lines of {log} (traceback frames left out):", highlight=False)
            for ln in lines:  # the exception itself wraps; what led to it is cut at the width
                wrap = bool(re.match(r"\w+(Error|Exception)\b", ln))
                self.console.print(Text(f"  | {ln}"), no_wrap=not wrap, overflow="fold" if wrap else "ellipsis")

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    # ---------------------------------------------------------------- rendering

    def _say(self, text: str) -> None:
        if not self.quiet:
            self.console.print(Text(text), no_wrap=True, overflow="ellipsis")

    def status(self) -> Text:
        now = time.monotonic()
        spin = _SPIN[int(now * 8) % len(_SPIN)]
        el = now - self._phase_t0
        if self._what in ("starting", "stopping", "warm-up"):
            text = f"{spin} {self._name}: {self._what} {el:.0f} s"
            last = tail(self._log, 1) if self._what != "warm-up" else []
            if last:
                text += f" · {last[0].strip()}"
        else:
            n, d = max(self._total, 1), self._done
            width = 20
            bar = "━" * (width * d // n) + "╺" + " " * (width - width * d // n)
            eta = f", ETA {el / d * (n - d):.0f} s" if 0 < d < n else ""
            text = f"{spin} {self._name} {self._what}: {bar[:width]} {d}/{self._total} requests, {el:.0f} s{eta}"
        return Text(text, no_wrap=True, overflow="ellipsis")


class _Status:
    def __init__(self, p: ConsoleProgress) -> None:
        self.p = p

    def __rich__(self) -> Text:
        return self.p.status()


# ---------------------------------------------------------------- the table


def fmt_stat(d: Dist | None, stat: str) -> str:
    """One statistic of a distribution for a table cell ('-' when there is none)."""
    return "-" if d is None else f"{d.stat(stat):.1f}"


def _server_ttft(s: LevelSummary) -> dict[str, Any] | None:
    return (s.server_metrics or {}).get("server_ttft_ms")


def latency_columns(run: RunResults) -> list[tuple[str, str, str, str, bool]]:
    """(column key, metric, stat, header, limited by the SLO) of every latency column, from the
    metric registry (core/metrics.py): each metric's table statistics, and the statistic each SLO
    term limits."""
    limited = {(t.metric, t.stat) for t in run.slo}
    out = []
    for m in latency():
        stats = [*m.table_stats, *(st for st in SLO_STATS if (m.key, st) in limited and st not in m.table_stats)]
        for st in stats:
            out.append((f"{m.key}{st[1:] if st.startswith('p') else st}", m.key, st, f"{m.label}\n{st}",
                        (m.key, st) in limited))
    return out


def _latency_cells(s: LevelSummary | MatchedSummary, run: RunResults) -> dict[str, str]:
    """{column key: value} of every latency column (latency_columns)."""
    return {k: fmt_stat(getattr(s, get(metric).summary_key), st) for k, metric, st, _, _ in latency_columns(run)}


def _columns(run: RunResults) -> list[tuple[str, str, bool]]:
    """(key, header, always shown): optional columns are added while the table still fits, those
    the SLO limits first (comparison_table)."""
    narrow = {(m.key, st) for m in latency() for st in m.narrow_stats}
    return [("backend", "backend", True), ("load", "load", True), ("ok", "ok", True),
            ("tok_s", "out\ntok/s", True), ("req_s", "req/s", False),
            *((k, head, (metric, st) in narrow) for k, metric, st, head, _ in latency_columns(run)),
            ("srv", "TTFT mean\nclnt/srv", False), ("queue", "engine\nqueue", False),
            ("outside", "outside\nengine", False), ("pfx", "prefix\nhit", False), ("goodput", "goodput\nreq/s", True),
            ("slo", "SLO", True)]


def _cells(run: RunResults, name: str, label: str, s: LevelSummary | MatchedSummary, requests: int,
           matched: MatchedSummary | None = None) -> dict[str, str]:
    row = {"backend": name, "load": label, "ok": f"{s.ok}/{requests}", "tok_s": f"{s.output_tok_s:.1f}",
           "req_s": f"{s.req_s:.2f}", **_latency_cells(s, run), "srv": "-"}
    if isinstance(s, LevelSummary):
        srv = _server_ttft(s)
        mean = srv.get("mean") if isinstance(srv, dict) else None
        row["srv"] = f"{fmt_stat(s.ttft_ms, 'mean')}/{'-' if mean is None else f'{mean:.1f}'}"
        tb = s.time_breakdown  # means, ms (compare/analysis/breakdown.py)
        row["queue"] = "-" if tb is None or tb.queued_ms is None else f"{tb.queued_ms:.1f}"
        row["outside"] = "-" if tb is None or tb.outside_ms is None else f"{tb.outside_ms:.1f}"
        pc = s.prefix_cache
        row["pfx"] = "-" if pc is None or pc.hit_rate is None else f"{pc.hit_rate:.0%}"
    g = s if matched is None else matched
    row["goodput"] = f"{g.goodput_req_s or 0:.2f}"
    row["slo"] = "✓" if g.slo_met else "✗"
    return row


def comparison_table(run: RunResults | dict[str, Any], width: int | None = None,
                     labels: dict[str, str] | None = None) -> Table:
    """Every backend x level; ``width``: the columns that fit it (None: all of them)."""
    run = as_run(run)
    labels = labels or {n: n for n in run.backends}
    has_srv = any(_server_ttft(s) for b in run.backends.values() for s in b.levels.values())
    rows: list[dict[str, str]] = []
    for name, b in run.backends.items():
        if not b.levels:
            rows.append({"backend": labels[name], "load": "-", "ok": b.status})
        for label, s in b.levels.items():
            rows.append(_cells(run, labels[name], label, s, s.requests))
            ms = _matched(run.length_matched, name, label)  # length-matched numbers under the raw ones
            if ms is not None and run.length_matched is not None:
                rows.append(_cells(run, labels[name], f"{label} @k", ms, run.length_matched.levels[label].requests, ms))
    has = {k: any(r.get(k, "-") != "-" for r in rows) for k in ("queue", "outside", "pfx")}
    columns = _columns(run)
    keys = [k for k, _, _ in columns if (k not in ("goodput", "slo") or run.slo) and (k != "srv" or has_srv)
            and has.get(k, True)]

    def col_w(k: str) -> int:
        head = max(len(x) for x in dict((c[0], c[1]) for c in columns)[k].split("\n"))
        return max([head] + [len(r.get(k, "-")) for r in rows])

    if width is not None:  # optional columns only while everything fits (3 characters between columns)
        always = [k for k in keys if dict((c[0], c[2]) for c in columns)[k]]
        used = sum(col_w(k) + 3 for k in always) - 3
        limited = {k for k, *_, lim in latency_columns(run) if lim}
        for k in sorted(keys, key=lambda k: k not in limited):  # stable: the SLO's columns first
            if k not in always and used + col_w(k) + 3 <= width:
                always.append(k)
                used += col_w(k) + 3
        keys = [k for k in keys if k in always]
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 1), pad_edge=False)
    heads = dict((c[0], c[1]) for c in columns)
    for k in keys:
        t.add_column(heads[k], justify="left" if k in ("backend", "load") else "right", no_wrap=True)
    for r in rows:
        t.add_row(*[Text(r.get(k, "-")) for k in keys])  # names such as vllm[block_size=32] are not markup
    t.caption = "latencies in ms, measured at the client"
    if "queue" in keys or "outside" in keys:
        t.caption += "; engine queue, outside engine: means from the engine's own timings"
    t.caption_justify = "left"
    if run.length_matched:
        t.caption += "\n" + matched_note(run.length_matched)
    return t


def _matched(section: LengthMatched | None, name: str, label: str) -> MatchedSummary | None:
    lv = section.levels.get(label) if section else None
    return lv.backends.get(name) if lv else None


def matched_note(section: LengthMatched) -> str:
    """The one-line explanation printed under every table that shows ``@k`` rows."""
    return f"'@k' rows are length-matched ({section.reason}): {section.definition}"


def matched_row(run: RunResults, name: str, label: str) -> list[str] | None:
    """backend, 'LEVEL @k', ok, tok/s, req/s, then the latency columns (latency_columns)."""
    s = _matched(run.length_matched, name, label)
    if s is None or run.length_matched is None:
        return None
    lv = run.length_matched.levels[label]
    return [name, f"{label} @k", f"{s.ok}/{lv.requests}", f"{s.output_tok_s:.1f}", f"{s.req_s:.2f}",
            *_latency_cells(s, run).values()]


# ---------------------------------------------------------------- the end of `compare run`


def print_summary(console: Console, results_dir: Path, price: float | None = None,
                  margin: float | None = None, quiet: bool = False) -> None:
    """The answer (3-5 lines), then the table, the legend, the caveats once, and where it all is."""
    from compare.analysis.headline import headlines
    from compare.analysis.verdict import verdict_from_results
    from core.results import load_results

    run, _ = load_results(results_dir)
    v = verdict_from_results(results_dir, price, margin)
    labels = short_labels(run.backends)
    ref = f"reference {labels.get(v.reference, v.reference)}" if len(v.backends) > 1 else "one backend"
    if not quiet:
        console.print()
    console.print(f"[bold]Verdict[/bold] ({escape(ref)}, run {run.status})", highlight=False)
    from compare.report.max_rate import answer_lines  # --find-max-rate: one line per backend

    from compare.analysis.verdict import cost_lines  # --gpu-hour-price: every device a backend occupies

    for line in (headlines(run, v, lambda n: labels.get(n, n)) + answer_lines(run, lambda n: labels.get(n, n))
                 + cost_lines(v, lambda n: labels.get(n, n))):
        for part in textwrap.wrap(line, max(20, console.width - 2)):  # wrapped lines keep the indent
            console.print(Text(f"  {part}"))
    if not quiet:
        console.print()
        console.print(comparison_table(run, console.width, labels))
        for line in legend(labels):
            console.print(f"  {escape(line)}", highlight=False)
        from compare.report import turns  # multi-turn sessions: TTFT by turn per column

        if turns.has_sessions(run):
            console.print(_plain_table("TTFT p50 by turn (ms)", turns.headers(run, list(run.backends),
                                                                               lambda n: labels.get(n, n)),
                                       turns.rows(run, list(run.backends))))
        for line in v.quality:  # measured (with deltas), or skipped/refused and why, and how to switch it
            said = line if line.startswith(("quality ", "--quality")) else f"quality: {line}"
            console.print(Text(said, style="dim" if line.startswith("--") else ""))
        for c in v.caveats:
            console.print(Text(f"! {c}", style="yellow"))
        from compare.analysis.bottleneck import gpu_note

        if gpu_note(run):  # said once per run, not per level
            console.print(Text(gpu_note(run) or "", style="dim"))
    # paths are never broken across lines (a terminal wraps them; a copied path must stay whole)
    console.print(f"results: {results_dir}" + ("" if quiet else "  (engine logs in logs/)"), highlight=False,
                  soft_wrap=True)
    if not quiet:
        console.print(f"report with plots: compare report {results_dir} --html", highlight=False, soft_wrap=True)


def _plain_table(title: str, headers: list[str], rows: list[list[str]]) -> Table:
    t = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
    for i, h in enumerate(headers):
        t.add_column(h, justify="left" if i < 2 else "right")
    for r in rows:
        t.add_row(*r)
    return t
