"""Typed run.json ``levels[...].sessions``: a level's multi-turn sessions by turn index (written by
compare/analysis/turns.py)."""
from __future__ import annotations

from pydantic import Field

from core.results.base import Closed as _Closed
from core.results.dist import Dist


class TurnStats(_Closed):
    """One turn index of a level's multi-turn sessions."""

    turn: int  # 0: a session's first turn
    requests: int
    ok: int
    prompt_tokens_mean: float | None = None
    ttft_ms: Dist | None = None
    itl_ms: Dist | None = None


class SessionStats(_Closed):
    """A level's multi-turn sessions: latency by turn index and how long each session lasted."""

    sessions: int  # sessions that sent a turn
    completed: int  # sessions whose every turn succeeded
    duration_s: Dist | None = None  # first turn's send to the last reply's end (think times included)
    turns: list[TurnStats] = Field(default_factory=list)
