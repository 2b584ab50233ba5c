"""OpenAI completions and chat completions streaming (vLLM serve, SGLang, trtllm-serve, TGI Messages).

vLLM extensions are sent because they make the measurement exact and other servers ignore
unknown fields: ``return_token_ids`` (token ids per chunk: exact counts) and ``ignore_eos``
(forced output length). ``stream_options.include_usage`` asks for the final usage chunk.
"""
from __future__ import annotations

from typing import Any

from core.errors import FailureKind
from core.records import GenerationRequest, TokenEvent
from backends.http.protocol import (FAST_OPENAI, FAST_OPENAI_CHAT, UNKNOWN_ID, BadEvent, Done, Parsed, Protocol,
                                    bad_event, decode_event, int_ids, number, obj as _obj, objects, opt_int, opt_str,
                                    token_event)
from backends.http.sse import RawEvent

try:
    import msgspec
except ImportError:  # pragma: no cover - msgspec comes with vLLM; the generic path parses everything
    msgspec = None  # type: ignore[assignment]


def _sampling(req: GenerationRequest) -> dict[str, Any]:
    p: dict[str, Any] = {"max_tokens": req.max_tokens, "stream": True,
                         "stream_options": {"include_usage": True},
                         "temperature": req.temperature, "top_p": req.top_p,
                         "return_token_ids": True}
    if req.ignore_eos:
        p["ignore_eos"] = True
    if req.seed is not None:
        p["seed"] = req.seed
    return p


def completions_payload(req: GenerationRequest, model: str) -> dict[str, Any]:
    if req.prompt_token_ids is not None:
        prompt: Any = list(req.prompt_token_ids)
    elif req.prompt_text is not None:
        prompt = req.prompt_text
    else:  # the backend renders messages to ids before calling us
        raise ValueError("completions take prompt ids or text; render messages with the chat template first")
    p = {"model": model, "prompt": prompt, **_sampling(req)}
    if req.logprobs is not None:
        p["logprobs"] = req.logprobs
    return p


def chat_payload(req: GenerationRequest, model: str) -> dict[str, Any]:
    if req.messages is None:
        raise ValueError("chat completions take messages; wrap text prompts as one user message first")
    p = {"model": model, "messages": [{"role": r, "content": c} for r, c in req.messages], **_sampling(req)}
    if req.logprobs is not None:
        p["logprobs"] = True
        p["top_logprobs"] = req.logprobs
    return p


def parse_envelope(raw: RawEvent) -> tuple[dict[str, Any] | None, list[Parsed]]:
    """What every OpenAI-protocol chunk shares: its JSON object, or (None, the end or the error it
    carries); also for servers whose chunks differ only in how they count tokens (backends/http/trtllm_openai.py)."""
    if raw.data == "[DONE]":
        return None, [Done(terminal=True)]
    return decode_event(raw)  # vLLM/OpenAI report mid-stream errors as {"error": {...}}


def _add_choice(out: list[Parsed], ch: dict[str, Any], ev: Parsed | None) -> None:
    """A choice's tokens (if any), then its finish reason (if any), in stream order."""
    if ev is not None:
        out.append(ev)
    reason = opt_str(ch.get("finish_reason"), "finish_reason")
    if reason:
        out.append(Done(finish_reason=reason))


def _add_usage(out: list[Parsed], obj: dict[str, Any]) -> list[Parsed]:
    u = _obj(obj.get("usage"), "usage")
    if u:
        out.append(Done(prompt_tokens=opt_int(u.get("prompt_tokens"), "usage.prompt_tokens"),
                        completion_tokens=opt_int(u.get("completion_tokens"), "usage.completion_tokens")))
    return out


def _tokens(raw: RawEvent, ids: Any, text: Any, lp_tokens: list[Any] | None,
            lps: tuple[float, ...] | None, tops: tuple[dict[int, float], ...] | None) -> TokenEvent | None:
    text = opt_str(text, "text") or ""
    tids = int_ids(ids) if ids is not None else ()
    if tids:
        pass
    elif lp_tokens:
        tids = (UNKNOWN_ID,) * len(lp_tokens)
    elif text:
        tids = (UNKNOWN_ID,)
    else:
        return None
    return token_event(raw.t_ns, tids, text, lps, tops)


# Fast path for the usual chunk: decoded straight into typed structs (no dicts; fields we do not
# read are skipped), valid only without logprobs and without "error". Anything else -- logprobs,
# an error object, a type it does not expect, JSON only Python's json takes (NaN) -- goes to the
# generic parser below, so both give the same result for every event (tests/backends/http/test_http_sse.py).
if msgspec is not None:
    class _Delta(msgspec.Struct, gc=False):
        content: str | None = None

    class _Choice(msgspec.Struct, gc=False):
        text: str | None = None
        delta: _Delta | None = None
        token_ids: tuple[int, ...] | None = None
        finish_reason: str | None = None
        logprobs: Any = None

    class _Chunk(msgspec.Struct, gc=False):
        choices: tuple[_Choice, ...] | None = None
        usage: dict[str, Any] | None = None
        error: Any = msgspec.UNSET  # present at all (even null): the generic parser reports it

    _decode_chunk = msgspec.json.Decoder(_Chunk).decode
    _FastError: type[Exception] = msgspec.DecodeError  # ValidationError is a subclass
else:  # pragma: no cover
    _decode_chunk = None


def _fast(raw: RawEvent, chat: bool) -> list[Parsed] | None:
    """The usual chunk parsed without dicts; None: use the generic parser."""
    try:
        obj = _decode_chunk(raw.data)
    except _FastError:
        return None
    if obj.error is not msgspec.UNSET:
        return None
    out: list[Parsed] = []
    for ch in obj.choices or ():
        if ch.logprobs is not None:
            return None
        text = ((ch.delta.content if ch.delta is not None else None) if chat else ch.text) or ""
        ids = ch.token_ids
        if ids:
            out.append(token_event(raw.t_ns, ids, text))
        elif text:
            out.append(token_event(raw.t_ns, (UNKNOWN_ID,), text))
        if ch.finish_reason:
            out.append(Done(finish_reason=ch.finish_reason))
    u = obj.usage
    if u:
        p, c = u.get("prompt_tokens"), u.get("completion_tokens")
        if (p is not None and type(p) is not int) or (c is not None and type(c) is not int):
            return None  # the generic parser names the bad field
        out.append(Done(prompt_tokens=p, completion_tokens=c))
    return out


def parse_completions(raw: RawEvent) -> list[Parsed]:
    if _decode_chunk is not None and raw.data != "[DONE]":
        fast = _fast(raw, False)
        if fast is not None:
            return fast
    try:
        obj, out = parse_envelope(raw)
        if obj is None:
            return out
        for ch in objects(obj.get("choices"), "choices"):
            lp = _obj(ch.get("logprobs"), "logprobs")
            lps = tops = None
            toks = None
            if lp:
                toks = lp.get("tokens")
                if toks is not None and type(toks) is not list:
                    raise BadEvent("logprobs.tokens must be a list")
                if lp.get("token_logprobs") is not None:
                    vals = lp["token_logprobs"]
                    if type(vals) is not list:
                        raise BadEvent("logprobs.token_logprobs must be a list")
                    lps = tuple(number(x, "logprobs.token_logprobs[]") for x in vals)
            _add_choice(out, ch, _tokens(raw, ch.get("token_ids"), ch.get("text"), toks, lps, tops))
        return _add_usage(out, obj)
    except BadEvent as e:
        return [bad_event(raw, e)]


def parse_chat(raw: RawEvent) -> list[Parsed]:
    if _decode_chunk is not None and raw.data != "[DONE]":
        fast = _fast(raw, True)
        if fast is not None:
            return fast
    try:
        obj, out = parse_envelope(raw)
        if obj is None:
            return out
        for ch in objects(obj.get("choices"), "choices"):
            delta = _obj(ch.get("delta"), "delta")
            content = objects(_obj(ch.get("logprobs"), "logprobs").get("content"), "logprobs.content") or None
            lps = tuple(number(c.get("logprob"), "logprobs.content[].logprob") for c in content) if content else None
            _add_choice(out, ch, _tokens(raw, ch.get("token_ids"), delta.get("content"), content, lps, None))
        return _add_usage(out, obj)
    except BadEvent as e:
        return [bad_event(raw, e)]


COMPLETIONS = Protocol(name="openai", path="/v1/completions", build_payload=completions_payload,
                       parse_event=parse_completions, prompt="ids_or_text", info_path="/v1/models",
                       fast=FAST_OPENAI, token_id_prompts=True, forced_output_length=True)
CHAT = Protocol(name="openai-chat", path="/v1/chat/completions", build_payload=chat_payload,
                parse_event=parse_chat, prompt="messages", info_path="/v1/models",
                fast=FAST_OPENAI_CHAT, token_id_prompts=False, forced_output_length=True)
