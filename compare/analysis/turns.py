"""Multi-turn sessions by turn index: does a later turn (a longer, shared history) answer faster
or slower, and how long does a whole session take? A level's prefix-cache hit rate sits beside it
in the level's ``prefix_cache`` (compare/analysis/breakdown.py)."""
from __future__ import annotations

from typing import Sequence

from compare.analysis.metrics import dist
from core.metrics import itls_ns, ttft_ns
from core.records import GenerationRequest, RequestRecord
from core.results.sessions import SessionStats, TurnStats


def session_stats(records: Sequence[RequestRecord], requests: Sequence[GenerationRequest]) -> SessionStats | None:
    """Per-turn TTFT/ITL and session durations of a level's records (None: not a session workload)."""
    where = {r.request_id: (sid, r.turn or 0) for r in requests if (sid := r.session_id) is not None}
    if not where:
        return None
    length = {}
    for r in requests:
        if r.session_id is not None:
            length[r.session_id] = length.get(r.session_id, 0) + 1
    by_turn: dict[int, list[RequestRecord]] = {}
    by_session: dict[str, list[RequestRecord]] = {}
    for rec in records:
        if rec.request_id not in where:
            continue
        sid, turn = where[rec.request_id]
        by_turn.setdefault(turn, []).append(rec)
        by_session.setdefault(sid, []).append(rec)
    turns = []
    for k in sorted(by_turn):
        recs = by_turn[k]
        ok = [r for r in recs if r.ok]
        prompts = [r.prompt_tokens for r in ok if r.prompt_tokens]
        turns.append(TurnStats(turn=k, requests=len(recs), ok=len(ok),
                               prompt_tokens_mean=sum(prompts) / len(prompts) if prompts else None,
                               ttft_ms=dist(ttft_ns(r) for r in ok),
                               itl_ms=dist(x for r in ok for x in itls_ns(r))))
    complete = [recs for sid, recs in by_session.items() if len(recs) == length[sid] and all(r.ok for r in recs)]
    durations = (max(r.t_end_ns for r in recs) - min(r.t_sent_ns for r in recs) for recs in complete)
    return SessionStats(sessions=len(by_session), completed=len(complete), duration_s=dist(durations, 1e-9),
                        turns=turns)
