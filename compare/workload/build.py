"""Seeded workloads: the identical request list every backend receives.

A workload is described by a small YAML file (schema: ``WorkloadSpec``; docs/workloads.md) and
expanded deterministically into ``GenerationRequest``s. The expanded list is saved with the
results, so any run can be replayed exactly (``compare run --replay RESULTS_DIR``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from compare.workload.lengths import LengthDist
from compare.workload.sessions import SessionsSpec
from core.records import GenerationRequest

__all__ = ["LengthDist", "SharedPrefix", "WorkloadSpec", "build_requests"]


class SharedPrefix(BaseModel):
    """RAG / knowledge-base style: each request = one of N shared documents + its own question."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    num_documents: int = Field(gt=0)
    document_tokens: int = Field(gt=0)


class WorkloadSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    # every request id starts with it (workload.jsonl, requests.jsonl): a name of megabytes made
    # files of gigabytes
    name: str = Field("synthetic", min_length=1, max_length=128)
    seed: int = Field(0, ge=0)
    num_requests: int = Field(16, gt=0)
    input: LengthDist = LengthDist(dist="fixed", value=64)
    output: LengthDist = LengthDist(dist="fixed", value=32)
    # token_ids: prompts are token-id lists (no tokenizer differences between backends)
    # text: prompts are text decoded from seeded token ids; chat: one user message of that text
    prompt_format: Literal["token_ids", "text", "chat"] = "token_ids"
    shared_prefix: SharedPrefix | None = None
    # multi-turn sessions (compare/workload/sessions.py): num_requests and input/output do not apply
    sessions: SessionsSpec | None = None
    # ShareGPT-format JSON/JSONL: conversations[0] (human) is the prompt, the next turn's
    # length in tokens (when a tokenizer is given) or output dist is the output length
    sharegpt: str | None = None
    ignore_eos: bool = True  # force the output length where the backend can
    # vocabulary range to draw synthetic token ids from (avoid special tokens at the top)
    token_id_range: tuple[int, int] = (10, 3000)

    @model_validator(mode="after")
    def _check(self) -> "WorkloadSpec":
        lo, hi = self.token_id_range
        if not 0 <= lo < hi:
            raise ValueError("token_id_range must be [low, high) with 0 <= low < high")
        if self.sessions is not None and (self.shared_prefix or self.sharegpt):
            raise ValueError("sessions replace shared_prefix and sharegpt: give ShareGPT conversations as "
                             "sessions.sharegpt, a shared prefix as sessions.system_prompt_tokens")
        return self


def _random_ids(rng: np.random.Generator, n: int, id_range: tuple[int, int]) -> list[int]:
    return [int(x) for x in rng.integers(id_range[0], id_range[1], size=n)]


def build_requests(spec: WorkloadSpec, tokenizer: Any | None = None,
                   sharegpt: list[Any] | None = None) -> list[GenerationRequest]:
    """Deterministic in (spec, tokenizer): the same spec gives the same requests on any machine.
    ``sharegpt``: the conversations of ``spec.sharegpt`` (load_sharegpt) or of ``spec.sessions.sharegpt``
    (compare/workload/sessions.py load_conversations) already read."""
    rng = np.random.default_rng(spec.seed)
    if spec.sessions is not None:
        from compare.workload.sessions import build_sessions

        return build_sessions(spec, rng, tokenizer, sharegpt)  # type: ignore[arg-type]
    if spec.sharegpt:
        return _sharegpt_requests(spec, rng, tokenizer, sharegpt)
    n = spec.num_requests
    in_lens = spec.input.sample(rng, n)
    out_lens = spec.output.sample(rng, n)
    docs: list[list[int]] = []
    if spec.shared_prefix:
        sp = spec.shared_prefix
        docs = [_random_ids(rng, sp.document_tokens, spec.token_id_range) for _ in range(sp.num_documents)]
    reqs = []
    for i in range(n):
        ids = _random_ids(rng, in_lens[i], spec.token_id_range)
        if docs:
            ids = docs[int(rng.integers(0, len(docs)))] + ids
        reqs.append(_make_request(spec, f"{spec.name}-{i:05d}", ids, out_lens[i], tokenizer))
    return reqs


def _make_request(spec: WorkloadSpec, rid: str, ids: list[int], out_len: int,
                  tokenizer: Any | None) -> GenerationRequest:
    common = dict(request_id=rid, max_tokens=out_len, ignore_eos=spec.ignore_eos, seed=spec.seed)
    if spec.prompt_format == "token_ids":
        return GenerationRequest(prompt_token_ids=tuple(ids), **common)
    if tokenizer is None:
        raise ValueError(f"prompt_format={spec.prompt_format} needs the model's tokenizer")
    text = tokenizer.decode(ids, skip_special_tokens=True)
    if spec.prompt_format == "text":
        return GenerationRequest(prompt_text=text, **common)
    return GenerationRequest(messages=(("user", text),), **common)


def load_sharegpt(path_: str) -> list[tuple[str, str]]:
    """(prompt, reply) of each conversation of a ShareGPT JSON list or JSONL file: read and checked
    before anything slow (a tokenizer) is loaded, so a bad file is refused at once."""
    from core.fsutil import read_user_json, read_user_jsonl

    path = Path(path_)
    fix = 'pass a ShareGPT dataset: a JSON list (or JSONL) of {"conversations": [{"value": ...}, ...]}'
    rows = (read_user_jsonl if path.suffix == ".jsonl" else read_user_json)(path, "ShareGPT file", fix)
    convs = []
    for row in rows if isinstance(rows, list) else []:
        turns = (row.get("conversations") or row.get("conversation") or []) if isinstance(row, dict) else []
        if (isinstance(turns, list) and len(turns) >= 2 and all(isinstance(t, dict) for t in turns[:2])
                and isinstance(turns[0].get("value"), str) and turns[0]["value"]):
            convs.append((turns[0]["value"], str(turns[1].get("value", ""))))
    if not convs:
        raise ValueError(f"{path}: no ShareGPT conversations with a prompt and a reply")
    return convs


def _sharegpt_requests(spec: WorkloadSpec, rng: np.random.Generator, tokenizer: Any | None,
                       convs: list[tuple[str, str]] | None) -> list[GenerationRequest]:
    if convs is None:
        convs = load_sharegpt(spec.sharegpt)  # type: ignore[arg-type]
    order = rng.permutation(len(convs))[: spec.num_requests]
    fallback_out = spec.output.sample(rng, len(order))
    reqs = []
    for k, idx in enumerate(order):
        prompt, reply = convs[int(idx)]
        out_len = fallback_out[k]
        if tokenizer is not None and reply:
            out_len = max(1, len(tokenizer.encode(reply, add_special_tokens=False)))
        rid = f"{spec.name}-{k:05d}"
        common = dict(request_id=rid, max_tokens=out_len, ignore_eos=spec.ignore_eos, seed=spec.seed)
        if spec.prompt_format == "token_ids":
            if tokenizer is None:
                raise ValueError("ShareGPT with prompt_format=token_ids needs the model's tokenizer")
            ids = tokenizer.encode(prompt, add_special_tokens=False)
            reqs.append(GenerationRequest(prompt_token_ids=tuple(ids), **common))
        elif spec.prompt_format == "text":
            reqs.append(GenerationRequest(prompt_text=prompt, **common))
        else:
            reqs.append(GenerationRequest(messages=(("user", prompt),), **common))
    return reqs


def request_to_dict(r: GenerationRequest) -> dict[str, Any]:
    d: dict[str, Any] = {"request_id": r.request_id, "max_tokens": r.max_tokens,
                         "ignore_eos": r.ignore_eos, "temperature": r.temperature,
                         "top_p": r.top_p, "seed": r.seed, "logprobs": r.logprobs}
    if r.prompt_token_ids is not None:
        d["prompt_token_ids"] = list(r.prompt_token_ids)
    if r.prompt_text is not None:
        d["prompt_text"] = r.prompt_text
    if r.messages is not None:
        d["messages"] = [list(m) for m in r.messages]
    if r.session_id is not None:
        d.update(session_id=r.session_id, turn=r.turn, think_time_s=r.think_time_s)
    return d


def request_from_dict(d: Any) -> GenerationRequest:
    """A request as workload.jsonl holds it, each field checked against ``GenerationRequest``'s
    types (core.shape.ShapeError names the field, the value and what is allowed)."""
    from core.shape import dataclass_from

    req: GenerationRequest = dataclass_from(GenerationRequest, d)
    return req
