"""Multi-turn sessions: a conversation's turns as requests whose prompt is the conversation so far.

Turn k's prompt is the shared system prompt, every earlier user turn and its reply, then user turn
k. The replies in that history come from the workload (seeded synthetic ids, or the replies a
ShareGPT conversation recorded), never from an engine's output: every backend gets the same
prompts, token for token, whatever it answered. ``token_ids`` prompts concatenate the ids;
``chat`` prompts are the messages (system, user, assistant, ..., user), rendered by each backend
with the model's chat template; ``text`` joins the messages' text with newlines.

The requests are listed session by session, turns in order, each with ``session_id``, ``turn``
and ``think_time_s`` (the wait between the previous reply's end and this turn's send); the
executor (compare/running/sessions.py) sends a session's turns in that order.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from compare.workload.lengths import LengthDist
from core.records import GenerationRequest

# one conversation of a file: (system prompt or "", [(user text, reply text), ...])
Conversation = tuple[str, list[tuple[str, str]]]


class SessionsSpec(BaseModel):
    """The ``sessions:`` section of a workload YAML (docs/workloads.md)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    num_sessions: int = Field(8, gt=0)
    turns: LengthDist = LengthDist(dist="fixed", value=4)  # turns per session (synthetic)
    user_tokens: LengthDist = LengthDist(dist="fixed", value=64)  # each new user turn
    reply_tokens: LengthDist = LengthDist(dist="fixed", value=32)  # each reply = the turn's output length
    system_prompt_tokens: int = Field(0, ge=0)  # one system prompt shared by every session
    think_time_s: float = Field(0.0, ge=0, le=3600)  # between a reply's end and the next turn's send
    think_time_dist: Literal["fixed", "exponential"] = "fixed"  # exponential: think_time_s is the mean
    # ShareGPT JSON/JSONL conversations, every turn: the recorded replies are the history and each
    # reply's length in tokens is its turn's output length (reply_tokens when no tokenizer is given)
    sharegpt: str | None = None
    max_turns: int | None = Field(None, gt=0)  # a ShareGPT conversation's first turns only


def is_sessions(requests: list[GenerationRequest]) -> bool:
    return bool(requests) and requests[0].session_id is not None


def group_sessions(requests: list[GenerationRequest]) -> list[list[GenerationRequest]]:
    """The requests as sessions (first appearance order), each session's turns in turn order."""
    by: dict[str, list[GenerationRequest]] = {}
    for r in requests:
        by.setdefault(r.session_id or r.request_id, []).append(r)
    return [sorted(turns, key=lambda r: r.turn or 0) for turns in by.values()]


def build_sessions(spec: Any, rng: np.random.Generator, tokenizer: Any | None,
                   conversations: list[Conversation] | None = None) -> list[GenerationRequest]:
    ss = spec.sessions
    assert ss is not None
    if ss.sharegpt:
        convs = conversations if conversations is not None else load_conversations(ss.sharegpt)
        return _sharegpt_sessions(spec, rng, tokenizer, convs)
    lo, hi = spec.token_id_range
    system = [int(x) for x in rng.integers(lo, hi, size=ss.system_prompt_tokens)]
    n_turns = ss.turns.sample(rng, ss.num_sessions)
    sessions = []
    for s in range(ss.num_sessions):
        users = ss.user_tokens.sample(rng, n_turns[s])
        replies = ss.reply_tokens.sample(rng, n_turns[s])
        turns = [([int(x) for x in rng.integers(lo, hi, size=u)], [int(x) for x in rng.integers(lo, hi, size=r)])
                 for u, r in zip(users, replies)]
        sessions.append((system, turns, replies, _think_times(ss, rng, n_turns[s])))
    return [req for s, (sys_ids, turns, outs, think) in enumerate(sessions)
            for req in _render(spec, s, sys_ids, turns, outs, think, tokenizer)]


def _think_times(ss: SessionsSpec, rng: np.random.Generator, n: int) -> list[float]:
    if ss.think_time_dist == "exponential" and ss.think_time_s > 0:
        t = [round(float(x), 6) for x in rng.exponential(ss.think_time_s, size=n)]
    else:
        t = [ss.think_time_s] * n
    return [0.0] + t[1:]  # a session's first turn is sent when the session starts


def _render(spec: Any, s: int, system: Any, turns: list[tuple[Any, Any]], outs: list[int],
            think: list[float], tokenizer: Any | None) -> list[GenerationRequest]:
    """One session's requests; ``system`` and each (user, reply) are token-id lists, or text (ShareGPT)."""
    fmt = spec.prompt_format
    sid = f"{spec.name}-s{s:05d}"
    out = []
    for k, (user, _) in enumerate(turns):
        common = dict(request_id=f"{sid}-t{k:02d}", max_tokens=outs[k], ignore_eos=spec.ignore_eos, seed=spec.seed,
                      session_id=sid, turn=k, think_time_s=think[k])
        parts = [("system", system)] if system else []
        for u, r in turns[:k]:
            parts += [("user", u), ("assistant", r)]
        parts.append(("user", user))
        if fmt == "token_ids":
            ids = [i for _, p in parts for i in _ids(p, tokenizer)]
            out.append(GenerationRequest(prompt_token_ids=tuple(ids), **common))
            continue
        msgs = tuple((role, _text(p, tokenizer, fmt)) for role, p in parts)
        if fmt == "chat":
            out.append(GenerationRequest(messages=msgs, **common))
        else:
            out.append(GenerationRequest(prompt_text="\n".join(t for _, t in msgs), **common))
    return out


def _ids(part: Any, tokenizer: Any | None) -> list[int]:
    if isinstance(part, str):
        if tokenizer is None:
            raise ValueError("ShareGPT sessions with prompt_format=token_ids need the model's tokenizer")
        return list(tokenizer.encode(part, add_special_tokens=False))
    return part


def _text(part: Any, tokenizer: Any | None, fmt: str) -> str:
    if isinstance(part, str):
        return part
    if tokenizer is None:
        raise ValueError(f"sessions with prompt_format={fmt} need the model's tokenizer")
    return tokenizer.decode(part, skip_special_tokens=True)


def _sharegpt_sessions(spec: Any, rng: np.random.Generator, tokenizer: Any | None,
                       convs: list[Conversation]) -> list[GenerationRequest]:
    ss = spec.sessions
    assert ss is not None
    order = rng.permutation(len(convs))[: ss.num_sessions]
    reqs = []
    for s, idx in enumerate(order):
        system, turns = convs[int(idx)]
        turns = turns[: ss.max_turns] if ss.max_turns else turns
        fallback = ss.reply_tokens.sample(rng, len(turns))
        outs = [max(1, len(tokenizer.encode(r, add_special_tokens=False))) if tokenizer is not None else fallback[k]
                for k, (_, r) in enumerate(turns)]
        reqs += _render(spec, s, system, turns, outs, _think_times(ss, rng, len(turns)), tokenizer)
    return reqs


_USER, _REPLY, _SYSTEM = {"human", "user"}, {"gpt", "assistant", "chatgpt", "bard", "bing"}, {"system"}


def load_conversations(path_: str) -> list[Conversation]:
    """Every multi-turn conversation of a ShareGPT JSON list or JSONL file, checked before anything
    slow is loaded: a bad row is refused with the file, its line (JSONL) or index (JSON list) and
    what is wrong. A conversation whose roles do not alternate user/reply is skipped."""
    from core.fsutil import read_user_text

    path = Path(path_)
    fix = 'each row needs {"conversations": [{"from": "human", "value": ...}, {"from": "gpt", "value": ...}, ...]}'
    text = read_user_text(path, "sessions file", fix)  # (a non-UTF-8 file: one line naming it)
    if path.suffix == ".jsonl":
        rows = [(f"line {n}", line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
        parsed = []
        for where, line in rows:
            try:
                parsed.append((where, json.loads(line)))
            except json.JSONDecodeError as e:
                raise ValueError(f"sessions file {path} {where}: not JSON ({e.msg}); {fix}") from None
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"sessions file {path} line {e.lineno}: not JSON ({e.msg}); {fix}") from None
        if not isinstance(data, list):
            raise ValueError(f"sessions file {path}: not a JSON list of conversations; {fix}")
        parsed = [(f"conversation {i}", row) for i, row in enumerate(data)]
    convs = [c for where, row in parsed if (c := _conversation(path, where, row, fix)) is not None]
    if not convs:
        raise ValueError(f"sessions file {path}: no conversation with a user turn and its reply; {fix}")
    return convs


def _conversation(path: Path, where: str, row: Any, fix: str) -> Conversation | None:
    turns = (row.get("conversations") or row.get("conversation")) if isinstance(row, dict) else None
    if not isinstance(turns, list):
        raise ValueError(f"sessions file {path} {where}: no \"conversations\" list; {fix}")
    msgs = []
    for k, t in enumerate(turns):
        value = t.get("value", t.get("content")) if isinstance(t, dict) else None
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"sessions file {path} {where}: turn {k} is empty (no text in \"value\"); "
                             f"give every turn its text or drop the turn")
        msgs.append((str(t.get("from", t.get("role", ""))).lower(), value))
    system = msgs.pop(0)[1] if msgs and msgs[0][0] in _SYSTEM else ""
    while msgs and msgs[0][0] not in _USER:  # (a conversation opened by the model: its opening is skipped)
        msgs.pop(0)
    pairs = []
    for i in range(0, len(msgs) - 1, 2):
        (ru, u), (rr, r) = msgs[i], msgs[i + 1]
        if ru not in _USER or rr not in _REPLY:
            return None
        pairs.append((u, r))
    return (system, pairs) if pairs else None
