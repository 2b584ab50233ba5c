"""The report's multi-turn part: TTFT by turn index per column (backend or ``--vary`` variant),
each later column against the first, with each column's prefix-cache hit rate over the level and
its session duration; from run.json's ``levels[LABEL].sessions`` (compare/analysis/turns.py)."""
from __future__ import annotations

from typing import Any, Callable

from core.results import RunResults

MEANING = ("turn k's prompt is the conversation so far (system prompt, every earlier turn and its reply, the new "
           "turn), identical on every column; TTFT p50 in ms per turn index, later columns against the first "
           "(negative: faster). prefix hit: the engine's prefix-cache hit rate over the whole level")


def has_sessions(run: RunResults) -> bool:
    return any(s.sessions for b in run.backends.values() for s in b.levels.values())


def headers(run: RunResults, names: list[str], label: Callable[[str], str]) -> list[str]:
    first = label(names[0]) if names else ""
    return ["load", "turn", "prompt tok", *(label(n) if i == 0 else f"{label(n)} (vs {first})"
                                            for i, n in enumerate(names))]


def rows(run: RunResults, names: list[str]) -> list[list[str]]:
    """One row per (level, turn index), then the level's prefix-hit and session-duration rows."""
    out: list[list[str]] = []
    for level in run.level_labels:
        per = {n: run.backends[n].levels.get(level) for n in names}
        stats = {n: s.sessions for n, s in per.items() if s is not None and s.sessions is not None}
        if not stats:
            continue
        turns = sorted({t.turn for st in stats.values() for t in st.turns})
        for k in turns:
            ttft = {n: _p50(st.turns, k) for n, st in stats.items()}
            prompt = next((t.prompt_tokens_mean for st in stats.values() for t in st.turns
                           if t.turn == k and t.prompt_tokens_mean), None)
            ref = ttft.get(names[0])
            out.append([level, str(k + 1), "-" if prompt is None else f"{prompt:.0f}",
                        *(_cell(ttft.get(n), ref if i else None) + _failed(stats.get(n), k)
                          for i, n in enumerate(names))])
        hit = []
        for n in names:
            pc = per[n].prefix_cache if per[n] is not None else None
            hit.append("-" if pc is None or pc.hit_rate is None else f"{pc.hit_rate:.0%}")
        out.append([level, "prefix hit", "", *hit])
        dur = []
        for n in names:
            d = stats[n].duration_s if n in stats else None
            dur.append("-" if d is None else f"{d.p50:.2f} s")
        out.append([level, "session p50", "", *dur])
    return out


def _failed(st: Any, k: int) -> str:
    """' [1/4 ok]' where some of the turn's requests failed (a failed turn ends its session)."""
    t = next((t for t in st.turns if t.turn == k), None) if st is not None else None
    return f" [{t.ok}/{t.requests} ok]" if t is not None and t.ok < t.requests else ""


def _p50(turns: list[Any], k: int) -> float | None:
    return next((t.ttft_ms.p50 for t in turns if t.turn == k and t.ttft_ms is not None), None)


def _cell(v: float | None, ref: float | None) -> str:
    if v is None:
        return "-"
    if ref is None or ref <= 0:
        return f"{v:.1f}"
    return f"{v:.1f} ({(v - ref) / ref:+.0%})"
