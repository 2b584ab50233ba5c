"""Console output: live progress while running, a side-by-side table at the end."""
from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress as RichProgress, TextColumn, TimeElapsedColumn
from rich.table import Table

from core.records import RequestRecord
from core.results import Dist, LengthMatched, LevelSummary, MatchedSummary, RunResults, as_run
from compare.running.runner import Progress
from compare.workload.schedule import LoadLevel


class ConsoleProgress(Progress):
    def __init__(self, console: Console) -> None:
        self.console = console
        self._bar: RichProgress | None = None
        self._task: Any = None

    def backend_start(self, name: str) -> None:
        self.console.print(f"[bold]▶ {name}[/bold]: starting")

    def level_start(self, name: str, level: LoadLevel, n: int) -> None:
        self._close()
        self._bar = RichProgress(TextColumn(f"  {name} {level.label}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=self.console, transient=True)
        self._bar.start()
        self._task = self._bar.add_task("", total=n)

    def request_done(self, rec: RequestRecord) -> None:
        if self._bar is not None:
            self._bar.advance(self._task)

    def level_done(self, name: str, level: LoadLevel, summary: LevelSummary) -> None:
        self._close()
        ttft = summary.ttft_ms.p50 if summary.ttft_ms else None
        self.console.print(f"  {name} {level.label}: {summary.ok}/{summary.requests} ok, "
                           f"{summary.output_tok_s:.1f} out tok/s, TTFT p50 "
                           f"{'-' if ttft is None else f'{ttft:.1f} ms'}")

    def message(self, text: str) -> None:
        self._close()
        self.console.print(f"[yellow]{text}[/yellow]")

    def _close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def fmt_stat(d: Dist | None, stat: str) -> str:
    """One statistic of a distribution for a table cell ('-' when there is none)."""
    return "-" if d is None else f"{d.stat(stat):.1f}"


def _server_ttft(s: LevelSummary) -> dict[str, Any] | None:
    return (s.server_metrics or {}).get("server_ttft_ms")


def _latency_cells(s: LevelSummary | MatchedSummary) -> list[str]:
    """TTFT p50/p95, TPOT p50/p95, ITL p99, E2E p95."""
    return [fmt_stat(s.ttft_ms, "p50"), fmt_stat(s.ttft_ms, "p95"), fmt_stat(s.tpot_ms, "p50"),
            fmt_stat(s.tpot_ms, "p95"), fmt_stat(s.itl_ms, "p99"), fmt_stat(s.e2e_ms, "p95")]


def comparison_table(run: RunResults | dict[str, Any]) -> Table:
    run = as_run(run)
    has_slo = bool(run.slo)
    t = Table(title=f"llm-compare {run.run_id} ({run.status})", show_lines=False)
    for col in ("backend", "load", "ok", "out tok/s", "req/s", "TTFT p50", "TTFT p95", "TPOT p50",
                "TPOT p95", "ITL p99", "E2E p95"):
        t.add_column(col, justify="left" if col in ("backend", "load") else "right")
    # server-side TTFT (engine histogram, /metrics) beside the client's: the gap is API-server
    # queueing + HTTP/SSE + network overhead (backends/server_metrics.py)
    has_srv = any(_server_ttft(s) for b in run.backends.values() for s in b.levels.values())
    if has_srv:
        t.add_column("TTFT mean client/server", justify="right")
    if has_slo:
        t.add_column("goodput req/s", justify="right")
        t.add_column("SLO", justify="center")
    for name, b in run.backends.items():
        if not b.levels:
            t.add_row(name, "-", b.status, *["-"] * 8, *(["-"] if has_srv else []),
                      *(["-", "-"] if has_slo else []))
        for label, s in b.levels.items():
            row = [name, label, f"{s.ok}/{s.requests}", f"{s.output_tok_s:.1f}", f"{s.req_s:.2f}",
                   *_latency_cells(s)]
            if has_srv:
                srv = _server_ttft(s)
                mean = srv.get("mean") if isinstance(srv, dict) else None
                row.append(f"{fmt_stat(s.ttft_ms, 'mean')}/{'-' if mean is None else f'{mean:.1f}'}")
            if has_slo:
                row += [f"{s.goodput_req_s or 0:.2f}", "✓" if s.slo_met else "✗"]
            t.add_row(*row)
            m = matched_row(run, name, label)  # length-matched numbers right under the raw ones
            if m is not None:
                ms = _matched(run.length_matched, name, label)
                m += ["-"] if has_srv else []
                if has_slo and ms is not None:
                    m += [f"{ms.goodput_req_s or 0:.2f}", "✓" if ms.slo_met else "✗"]
                t.add_row(*m)
    t.caption = "latencies in ms; TTFT/TPOT/ITL measured at the client from per-event timestamps"
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
    """backend, 'LEVEL @k', ok, tok/s, req/s, TTFT p50/p95, TPOT p50/p95, ITL p99, E2E p95."""
    s = _matched(run.length_matched, name, label)
    if s is None or run.length_matched is None:
        return None
    lv = run.length_matched.levels[label]
    return [name, f"{label} @k", f"{s.ok}/{lv.requests}", f"{s.output_tok_s:.1f}", f"{s.req_s:.2f}",
            *_latency_cells(s)]
