"""The driver's side of Ray cells: each cell's result merged into the one results directory.

A cell ran ``runner.run_backend`` on a node of its own against a :class:`CellWriter` (records in
memory, a scratch directory for run.json and logs). Merging applies what a local run writes, in
the same order: the column's section (capabilities, description, start time, quality), the
repeat's row, the pooled level rows over all repeats so far, the status rules (``complete`` after
the last repeat, ``failed`` with ``repeat N: ...``), the records into requests.jsonl and the engine
logs appended to ``RESULTS/logs/`` under a line naming the node. Where each cell ran goes to
run.json's ``ray.cells``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from backends.logs import LOG_DIR, log_file
from core.records import RequestRecord
from core.results import LevelSummary, ResultsWriter
from core.results.evolve import evolve
from core.results.models import RepeatRun
from compare.running.repeat_pool import RepeatPool

_PER_REPEAT = ("levels", "repeats", "status", "error", "start_s")


class CellWriter(ResultsWriter):
    """A cell's writer: records are kept for the driver (which writes requests.jsonl)."""

    def __init__(self, root: Path, run_id: str, header: dict[str, Any]) -> None:
        super().__init__(root, run_id, header)
        self.records: list[RequestRecord] = []

    def add_records(self, recs: Sequence[RequestRecord]) -> None:  # (add_record comes here too)
        self.records.extend(recs)


class Merger:
    def __init__(self, cfg: Any, writer: ResultsWriter, progress: Any) -> None:
        self.cfg, self.writer, self.progress = cfg, writer, progress
        self.failed: set[str] = set()
        self.merged: set[tuple[str, int]] = set()
        self.levels = {lv.label: lv for lv in cfg.levels}
        # the runner's own pooling rule, fed what a local run feeds it (each level's wall time, the
        # client lag's max and p99, whether the client fell behind)
        self.pool = RepeatPool()

    def merge(self, res: Any, opts: dict[str, Any]) -> None:
        cfg, writer, name, rep = self.cfg, self.writer, res.name, res.repeat
        self.merged.add((name, rep))
        self.progress.backend_start(name if cfg.repeats == 1 else f"{name} (repeat {rep + 1}/{cfg.repeats})")
        entry = writer.backend(name)
        ce = res.entry  # the cell's section, as run.json's JSON
        # capabilities, describe (latest), quality (repeat 0), ...
        upd: dict[str, Any] = {k: v for k, v in ce.items() if k not in _PER_REPEAT}
        if ce.get("start_s") is not None and "start_s" not in entry.model_fields_set:
            upd["start_s"] = ce["start_s"]
        entry = evolve(entry, **upd)
        for rec in res.records:
            writer.add_record(rec)
        if cfg.repeats > 1:
            this = RepeatRun.model_validate(
                (ce.get("repeats") or [{"repeat": rep, "status": ce.get("status", "failed"), "levels": {}}])[0])
            shown = this.levels
            levels = dict(entry.levels)
            for label in res.wall_ns:  # levels that ran to their end, pooled in repeat order
                key = (name, label)
                own = this.levels.get(label) or LevelSummary.model_validate(ce.get("levels", {}).get(label, {}))
                self.pool.add(key, res.wall_ns[label], res.loop_lag_ms.get(label, {"max": 0.0}),
                              [r for r in res.records if r.level == label], own.client_lagged)
                levels[label] = self.pool.pooled(cfg, key, own, rep + 1)
            entry = evolve(entry, repeats=[*(entry.repeats or []), this], levels=levels)
        else:
            shown = {k: LevelSummary.model_validate(v) for k, v in (ce.get("levels") or {}).items()}
            entry = evolve(entry, levels={**entry.levels, **shown})
        for label, summary in shown.items():
            if label in self.levels:
                self.progress.level_done(name, self.levels[label], summary)
        log = self._logs(name, rep, res)
        if res.ok:
            entry = evolve(entry, status="complete" if rep == cfg.repeats - 1 else "running")
        else:
            self.failed.add(name)
            error = ce.get("error") or "the cell ended without a result"
            if cfg.repeats > 1 and not error.startswith("repeat "):
                error = f"repeat {rep + 1}: {error}"
            status = "interrupted" if res.interrupted else ce.get("status") or "failed"
            if status in ("running", "pending", "complete"):
                status = "failed"
            entry = evolve(entry, status=status, error=error)
            if not res.interrupted:
                self.progress.backend_failed(name, error.removeprefix(f"repeat {rep + 1}: "), log)
        writer.set_backend(name, entry)
        ray = writer.results.ray
        writer.update(ray=evolve(ray, cells=[*ray.cells, {"backend": name, "repeat": rep, "ok": res.ok,
                                                          "resources": opts, **res.node}]))
        writer.flush()

    def _logs(self, name: str, rep: int, res: Any) -> Path:
        """The cell's engine logs appended to RESULTS/logs/, each under a line naming where it ran."""
        main = log_file(self.writer.dir, name)
        d = self.writer.dir / LOG_DIR
        node = res.node
        banner = (f"--- {name}, repeat {rep + 1}: Ray node {node.get('ip', '?')} ({node.get('host', '?')}), "
                  f"worker pid {node.get('pid', '?')} ---\n").encode()
        try:
            d.mkdir(exist_ok=True)
            for fname, data in res.logs.items():
                with open(d / fname, "ab") as f:
                    f.write(banner + data + (b"" if data.endswith(b"\n") or not data else b"\n"))
        except OSError:
            pass  # logs are a convenience; the measurements are already in run.json
        return main
