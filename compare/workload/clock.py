"""A trace's own clock kept with its request list: ``workload.jsonl`` rows carry each request's
send offset (``send_offset_ns``) when the run's level was a trace (``--trace``), so ``--replay DIR``
sends the same requests at the same offsets instead of on another schedule."""
from __future__ import annotations

import math
from typing import Any, Sequence

from compare.workload.build import request_to_dict
from compare.workload.schedule import LoadLevel
from core.records import GenerationRequest

KEY = "send_offset_ns"


def trace_level(offsets_ns: Sequence[int]) -> LoadLevel:
    """The one open-loop level ``trace`` sent at these offsets; its ``value`` is the mean rate."""
    span_s = offsets_ns[-1] / 1e9 if offsets_ns else 0.0
    rate = (len(offsets_ns) - 1) / span_s if span_s > 0 else math.inf  # arrivals per second
    return LoadLevel("rate", rate, offsets_ns=tuple(offsets_ns))


def workload_rows(requests: Sequence[GenerationRequest], levels: Sequence[LoadLevel]) -> list[dict[str, Any]]:
    """``workload.jsonl``'s rows: each request, with its trace offset where a level carries the
    trace's clock for the whole list."""
    rows = [request_to_dict(r) for r in requests]
    clock = next((lv.offsets_ns for lv in levels if lv.offsets_ns is not None), None)
    if clock is not None and len(clock) == len(rows):
        for row, off in zip(rows, clock):
            row[KEY] = int(off)
    return rows


def split_clock(rows: list[dict[str, Any]], where: str) -> tuple[list[dict[str, Any]], list[int] | None]:
    """(the rows without their offsets, the offsets or None); ValueError (one line) for a file
    where only some rows carry one, or offsets that go backwards."""
    have = [KEY in r for r in rows]
    if not any(have):
        return rows, None
    if not all(have):
        k = have.index(False) + 1
        raise ValueError(f"{where}: line {k} has no {KEY} while others do; replay a workload.jsonl "
                         f"as `compare run` wrote it")
    offsets = [r[KEY] for r in rows]
    if any(not isinstance(o, int) or o < 0 for o in offsets) or offsets != sorted(offsets):
        raise ValueError(f"{where}: {KEY} must be whole nanoseconds >= 0 in send order; replay a "
                         f"workload.jsonl as `compare run` wrote it")
    return [{k: v for k, v in r.items() if k != KEY} for r in rows], offsets
