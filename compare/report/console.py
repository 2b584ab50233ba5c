"""Console output: live progress while running, a side-by-side table at the end."""
from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress as RichProgress, TextColumn, TimeElapsedColumn
from rich.table import Table

from core.records import RequestRecord
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

    def level_done(self, name: str, level: LoadLevel, summary: dict[str, Any]) -> None:
        self._close()
        ttft = (summary.get("ttft_ms") or {}).get("p50")
        self.console.print(f"  {name} {level.label}: {summary['ok']}/{summary['requests']} ok, "
                           f"{summary['output_tok_s']:.1f} out tok/s, TTFT p50 "
                           f"{'-' if ttft is None else f'{ttft:.1f} ms'}")

    def message(self, text: str) -> None:
        self._close()
        self.console.print(f"[yellow]{text}[/yellow]")

    def _close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def _fmt(d: dict[str, Any] | None, key: str) -> str:
    if not d or d.get(key) is None:
        return "-"
    return f"{d[key]:.1f}"


def comparison_table(run: dict[str, Any]) -> Table:
    has_slo = bool(run.get("slo"))
    t = Table(title=f"llm-compare {run['run_id']} ({run['status']})", show_lines=False)
    for col in ("backend", "load", "ok", "out tok/s", "req/s", "TTFT p50", "TTFT p95", "TPOT p50",
                "TPOT p95", "ITL p99", "E2E p95"):
        t.add_column(col, justify="left" if col in ("backend", "load") else "right")
    # server-side TTFT (engine histogram, /metrics) beside the client's: the gap is API-server
    # queueing + HTTP/SSE + network overhead (backends/server_metrics.py)
    has_srv = any((s.get("server_metrics") or {}).get("server_ttft_ms")
                  for b in run["backends"].values() for s in b.get("levels", {}).values())
    if has_srv:
        t.add_column("TTFT mean client/server", justify="right")
    if has_slo:
        t.add_column("goodput req/s", justify="right")
        t.add_column("SLO", justify="center")
    for name, b in run["backends"].items():
        if not b.get("levels"):
            t.add_row(name, "-", b.get("status", "?"), *["-"] * 8, *(["-"] if has_srv else []),
                      *(["-", "-"] if has_slo else []))
        for label, s in b.get("levels", {}).items():
            row = [name, label, f"{s['ok']}/{s['requests']}", f"{s['output_tok_s']:.1f}", f"{s['req_s']:.2f}",
                   _fmt(s.get("ttft_ms"), "p50"), _fmt(s.get("ttft_ms"), "p95"), _fmt(s.get("tpot_ms"), "p50"),
                   _fmt(s.get("tpot_ms"), "p95"), _fmt(s.get("itl_ms"), "p99"), _fmt(s.get("e2e_ms"), "p95")]
            if has_srv:
                srv = (s.get("server_metrics") or {}).get("server_ttft_ms")
                row.append(f"{_fmt(s.get('ttft_ms'), 'mean')}/{_fmt(srv, 'mean')}")
            if has_slo:
                row += [f"{s.get('goodput_req_s', 0):.2f}", "✓" if s.get("slo_met") else "✗"]
            t.add_row(*row)
            m = matched_row(run, name, label)  # length-matched numbers right under the raw ones
            if m is not None:
                ms = _matched(run, name, label) or {}
                m += ["-"] if has_srv else []
                m += [f"{ms.get('goodput_req_s', 0):.2f}", "✓" if ms.get("slo_met") else "✗"] if has_slo else []
                t.add_row(*m)
    t.caption = "latencies in ms; TTFT/TPOT/ITL measured at the client from per-event timestamps"
    if run.get("length_matched"):
        t.caption += "\n" + matched_note(run["length_matched"])
    return t


def _matched(run: dict[str, Any], name: str, label: str) -> dict[str, Any] | None:
    lv = ((run.get("length_matched") or {}).get("levels") or {}).get(label) or {}
    return (lv.get("backends") or {}).get(name)


def matched_note(section: dict[str, Any]) -> str:
    """The one-line explanation printed under every table that shows ``@k`` rows."""
    return f"'@k' rows are length-matched ({section.get('reason')}): {section.get('definition')}"


def matched_row(run: dict[str, Any], name: str, label: str) -> list[str] | None:
    """backend, 'LEVEL @k', ok, tok/s, req/s, TTFT p50/p95, TPOT p50/p95, ITL p99, E2E p95."""
    s = _matched(run, name, label)
    if s is None:
        return None
    lv = run["length_matched"]["levels"][label]
    return [name, f"{label} @k", f"{s['ok']}/{lv['requests']}", f"{s['output_tok_s']:.1f}", f"{s['req_s']:.2f}",
            _fmt(s.get("ttft_ms"), "p50"), _fmt(s.get("ttft_ms"), "p95"), _fmt(s.get("tpot_ms"), "p50"),
            _fmt(s.get("tpot_ms"), "p95"), _fmt(s.get("itl_ms"), "p99"), _fmt(s.get("e2e_ms"), "p95")]
