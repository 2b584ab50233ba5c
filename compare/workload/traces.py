"""Trace replay: a recorded production trace becomes the request list AND its send schedule.

Formats (detected from the file's content, or named with ``--trace-format``):

- ``mooncake``: JSONL, one object a line: ``timestamp`` (ms), ``input_length``, ``output_length``,
  ``hash_ids`` (one id per 512-token block of the prompt). Equal hash ids become identical
  prompt blocks, so the trace's prefix sharing reaches the engine's prefix cache.
- ``azure``: CSV with ``TIMESTAMP`` (a date-time or seconds), ``ContextTokens``, ``GeneratedTokens``.
- ``burstgpt``: CSV with ``Timestamp`` (seconds), ``Request tokens``, ``Response tokens``.

Every request is sent at its trace offset (open loop), scaled by the speed-up factor and limited to
a time window and a request cap. A malformed line is refused naming the file, the line and the problem.
"""
from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np

from core.records import MAX_REQUEST_TOKENS, GenerationRequest
from core.shape import show_value

BLOCK_TOKENS = 512  # Mooncake's hash_ids each stand for one block of this many prompt tokens
FORMATS = ("mooncake", "azure", "burstgpt")


class TraceError(ValueError):
    """A trace file that cannot be replayed; the message is the one line shown to the user."""


@dataclass(frozen=True, slots=True)
class TraceRow:
    offset_s: float  # seconds since the trace's first request
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Trace:
    requests: list[GenerationRequest]
    offsets_ns: list[int]  # send offset of each request from the level's start
    fmt: str


def detect_format(path: Path, text: str | None = None) -> str:
    first = _first_line(path, _text(path) if text is None else text)
    if first.lstrip().startswith("{"):
        return "mooncake"
    header = {h.strip() for h in first.split(",")}
    if {"ContextTokens", "GeneratedTokens"} <= header:
        return "azure"
    if {"Request tokens", "Response tokens"} <= header:
        return "burstgpt"
    raise TraceError(f"{path}:1: cannot tell the trace format from this line; "
                     f"pass --trace-format {'|'.join(FORMATS)}")


def _text(path: Path) -> str:
    """The whole trace through the user-file reader: a directory, a FIFO or device, a symlink
    loop, a huge or non-UTF-8 file is one line (core.errors.UserError), never a hang."""
    from core.fsutil import read_user_text

    return read_user_text(path, "--trace file", "pass a Mooncake JSONL or Azure/BurstGPT CSV trace")


def _first_line(path: Path, text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line
    raise TraceError(f"{path}: the trace is empty; pass a file with at least one request")


def _int(value: object, where: str, field: str) -> int:
    try:
        if isinstance(value, (bool, list, dict)) or value is None:
            raise TypeError
        n = int(str(value).strip())
    except (TypeError, ValueError):
        raise TraceError(f"{where}: {field} {show_value(value)}: should be a whole number >= 0") from None
    if n < 0:
        raise TraceError(f"{where}: {field} {n}: should be a whole number >= 0")
    if n > MAX_REQUEST_TOKENS:  # (its prompt would be built in memory, or its reply never end)
        raise TraceError(f"{where}: {field} {n}: should be at most {MAX_REQUEST_TOKENS} tokens")
    return n


MOONCAKE_KEYS = ("timestamp", "input_length", "output_length", "hash_ids")


def _read_mooncake(path: Path, text: str) -> list[tuple[int, float, int, int, tuple[int, ...]]]:
    rows = []
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{no}"
        try:
            d = json.loads(line)
        except json.JSONDecodeError as e:
            raise TraceError(f"{where}: not a JSON object ({e.msg})") from None
        if not isinstance(d, dict):
            raise TraceError(f"{where}: not a JSON object")
        unknown = [k for k in d if k not in MOONCAKE_KEYS]
        if unknown:
            raise TraceError(f"{where}: {unknown[0]!r} is not a Mooncake field (a line has "
                             f"{', '.join(MOONCAKE_KEYS)})")
        for key in ("timestamp", "input_length", "output_length"):
            if key not in d:
                raise TraceError(f"{where}: missing {key!r} (a Mooncake line has timestamp, "
                                 "input_length, output_length, hash_ids)")
        ts = _number(d["timestamp"], where, "timestamp") / 1000.0
        ids = d.get("hash_ids", [])
        if not isinstance(ids, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in ids):
            raise TraceError(f"{where}: hash_ids {show_value(ids)}: should be a list of whole numbers")
        rows.append((no, ts, _int(d["input_length"], where, "input_length"),
                     _int(d["output_length"], where, "output_length"), tuple(ids)))
    return rows


def _number(value: object, where: str, field: str) -> float:
    try:
        if isinstance(value, (bool, list, dict)) or value is None:
            raise TypeError
        x = float(str(value).strip())
    except (TypeError, ValueError):
        x = math.nan
    if not math.isfinite(x) or x < 0:
        raise TraceError(f"{where}: {field} {show_value(value)}: should be a finite number >= 0")
    return x


def _seconds(value: str, where: str) -> float:
    try:
        x = float(value)
    except ValueError:
        x = None
    if x is not None:
        if not (math.isfinite(x) and x >= 0):
            raise TraceError(f"{where}: TIMESTAMP {value!r}: should be finite seconds >= 0 or a date-time")
        return x
    try:  # Azure's traces stamp requests with a date-time, e.g. 2023-11-16 18:15:46.6805900
        text = value.strip()
        head, _, frac = text.partition(".")
        base = datetime.fromisoformat(head)
        return base.timestamp() + (float("0." + frac) if frac else 0.0)
    except ValueError:
        raise TraceError(f"{where}: TIMESTAMP {value!r} is neither seconds nor a date-time") from None


def _read_csv(path: Path, text: str, ts_col: str, in_col: str,
              out_col: str) -> list[tuple[int, float, int, int, tuple[int, ...]]]:
    rows = []
    reader = csv.DictReader(io.StringIO(text, newline=""))
    header = [h.strip() for h in reader.fieldnames or []]
    reader.fieldnames = header
    missing = [c for c in (ts_col, in_col, out_col) if c not in header]
    if missing:
        raise TraceError(f"{path}:1: missing column {', '.join(repr(c) for c in missing)} "
                         f"(have {', '.join(header)})")
    for rec in reader:
        no = reader.line_num
        where = f"{path}:{no}"
        rows.append((no, _seconds(rec[ts_col] or "", where), _int(rec[in_col], where, in_col),
                     _int(rec[out_col], where, out_col), ()))
    return rows


def read_rows(path_: str, fmt: str | None = None) -> tuple[str, list[TraceRow]]:
    """The trace's rows with offsets from its first request; refuses timestamps going backwards."""
    path = Path(path_)
    if fmt is not None and fmt not in FORMATS:
        raise TraceError(f"--trace-format {fmt!r}: use one of {', '.join(FORMATS)}")
    text = _text(path)
    fmt = fmt or detect_format(path, text)
    try:
        if fmt == "mooncake":
            raw = _read_mooncake(path, text)
        elif fmt == "azure":
            raw = _read_csv(path, text, "TIMESTAMP", "ContextTokens", "GeneratedTokens")
        else:
            raw = _read_csv(path, text, "Timestamp", "Request tokens", "Response tokens")
    except csv.Error as e:
        raise TraceError(f"{path}: not a CSV trace ({e}); pass a Mooncake JSONL or Azure/BurstGPT CSV") from None
    if not raw:
        raise TraceError(f"{path}: the trace has no requests")
    prev = raw[0][1]
    for no, ts, *_ in raw:
        if ts < prev:
            raise TraceError(f"{path}:{no}: timestamp goes backwards ({ts:g} s after {prev:g} s); "
                             "sort the trace by time")
        prev = ts
    t0 = raw[0][1]
    return fmt, [TraceRow(ts - t0, i, o, h) for _, ts, i, o, h in raw]


def select(rows: list[TraceRow], window: tuple[float, float] | None = None, speedup: float = 1.0,
           cap: int | None = None) -> list[tuple[float, TraceRow]]:
    """(send offset in seconds, row): rows within ``window`` (trace seconds, start inclusive,
    end exclusive), offsets re-based on the window's start and divided by ``speedup``, first ``cap``."""
    if not speedup > 0:
        raise TraceError(f"--trace-speedup {speedup:g}: must be > 0")
    lo, hi = window if window else (0.0, float("inf"))
    picked = [r for r in rows if lo <= r.offset_s < hi]
    if cap is not None:
        picked = picked[:cap]
    if not picked:
        raise TraceError(f"--trace-window {lo:g}:{hi:g}: no request of the trace falls in it")
    return [((r.offset_s - lo) / speedup, r) for r in picked]


def parse_window(text: str | None) -> tuple[float, float] | None:
    """``START:END`` in seconds of the trace (either side may be empty)."""
    if not text:
        return None
    start, sep, end = text.partition(":")
    try:
        lo = float(start) if start.strip() else 0.0
        hi = float(end) if end.strip() else float("inf")
    except ValueError:
        lo = hi = -1.0
    if not sep or lo < 0 or hi <= lo:
        raise TraceError(f"--trace-window {text!r}: use START:END seconds of the trace, e.g. 60:120")
    return lo, hi


def build_trace(path: str, fmt: str | None = None, *, speedup: float = 1.0,
                window: tuple[float, float] | None = None, cap: int | None = None, seed: int = 0,
                token_id_range: tuple[int, int] = (10, 3000), name: str = "trace") -> Trace:
    """Token-id prompts of the trace's lengths, sent at its offsets. Deterministic in its inputs:
    a Mooncake hash id always maps to the same block of ids, so shared ids share a prefix."""
    fmt, rows = read_rows(path, fmt)
    chosen = select(rows, window, speedup, cap)
    rng = np.random.default_rng(seed)
    blocks: dict[int, list[int]] = {}
    reqs, offsets = [], []
    for i, (offset, row) in enumerate(chosen):
        ids: list[int] = []
        for h in row.hash_ids:
            if len(ids) >= row.input_tokens:
                break
            if h not in blocks:
                # seeded by the hash id itself, so a block never depends on the rows before it
                blocks[h] = [int(x) for x in np.random.default_rng([seed, h]).integers(
                    token_id_range[0], token_id_range[1], size=BLOCK_TOKENS)]
            ids.extend(blocks[h])
        ids = ids[: row.input_tokens]
        if len(ids) < max(row.input_tokens, 1):
            need = max(row.input_tokens, 1) - len(ids)
            ids.extend(int(x) for x in rng.integers(token_id_range[0], token_id_range[1], size=need))
        reqs.append(GenerationRequest(request_id=f"{name}-{i:05d}", prompt_token_ids=tuple(ids),
                                      max_tokens=max(row.output_tokens, 1), ignore_eos=True, seed=seed))
        offsets.append(int(offset * 1e9))
    return Trace(reqs, offsets, fmt)
