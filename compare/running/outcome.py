"""What one load level's loop hands back: its records and timing (LevelOutcome), and the same
raised when a signal stopped it mid-level (LevelInterrupted)."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from compare.analysis.client_health import LagSamples
from compare.workload.schedule import LoadLevel
from core.records import RequestRecord


@dataclass
class LevelOutcome:
    level: LoadLevel
    records: list[RequestRecord]
    t_start_ns: int
    t_end_ns: int
    schedule_offsets_ns: list[int] | None
    loop_lag_ms: dict[str, float] = field(default_factory=dict)
    lag_samples: LagSamples | None = None  # each wake-up of the lag monitor (compare/analysis/client_health.py)
    # several client processes: each one's wake-ups with the records it sent (judged one by one)
    lag_samples_by_proc: list[tuple[LagSamples, list[RequestRecord]]] | None = None
    aborted: str | None = None
    planned: int = 0  # requests the level was to send
    client_procs: dict | None = None  # sent by several client processes (compare/running/multiproc.py)


class LevelInterrupted(asyncio.CancelledError):
    """The run was stopped (a signal) mid-level: ``outcome`` holds every finished request and
    each one in flight as a cancelled record, for a summary of the part that was measured."""

    def __init__(self, outcome: LevelOutcome) -> None:
        super().__init__()
        self.outcome = outcome
