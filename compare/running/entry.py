"""A backend's run.json section while it runs: typed, and replaced in the writer (never edited).

The runner keeps one engine start's repeat row (``RepeatRun``) here; with ``--repeats`` > 1 the
row lives in the section's ``repeats`` list too, so every change to it is put back there.
"""
from __future__ import annotations

from typing import Any

from core.results import BackendResult, LevelSummary, ResultsWriter
from core.results.evolve import evolve
from core.results.models import RepeatRun


class BackendEntry:
    def __init__(self, writer: ResultsWriter, name: str, rep: int, repeats: int) -> None:
        self.writer, self.name, self.rep, self.keep_repeat = writer, name, rep, repeats > 1
        self.this = RepeatRun(repeat=rep, status="running", levels={})
        if self.keep_repeat:
            self.update(repeats=[*(self.entry.repeats or []), self.this])
        else:
            self.update()

    @property
    def entry(self) -> BackendResult:
        return self.writer.backend(self.name)

    def update(self, **fields: Any) -> BackendResult:
        """Set fields of the backend's section (validated; written at the writer's next flush)."""
        return self.writer.update_backend(self.name, **fields)

    def update_repeat(self, **fields: Any) -> RepeatRun:
        """Set fields of this engine start's repeat row."""
        self.this = evolve(self.this, **fields)
        if self.keep_repeat:
            self.update(repeats=[self.this if r.repeat == self.rep else r for r in self.entry.repeats or []])
        return self.this

    def set_status(self, status: str, error: str | None = None) -> None:
        """This engine start ended ``status``; the section too (with ``error`` when given)."""
        self.update_repeat(status=status)
        self.update(status=status, **({"error": error} if error is not None else {}))

    def put_level(self, label: str, summary: LevelSummary, shown: LevelSummary | None = None,
                  show: bool = True) -> None:
        """A level's summary in the repeat row; ``shown`` (default: the same) in the section's levels
        (nothing there when ``show`` is False)."""
        self.update_repeat(levels={**self.this.levels, label: summary})
        if show:
            self.update(levels={**self.entry.levels, label: shown if shown is not None else summary})
