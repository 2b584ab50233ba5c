"""llama-server's native streaming protocol: ``POST /completion`` (llama.cpp b11434).

Why the native stream and not ``/v1/completions``: llama-server's OpenAI-compatible stream carries
text only (``choices[0].text``), no token ids, and it holds back the bytes of an incomplete UTF-8
character, so a byte-level BPE token can arrive as an empty chunk and its bytes with the next one:
token counts and token identity would be guessed. The native stream sends ``tokens`` (the ids
of each step, with ``return_tokens``), ``stop_type`` and, in its last event, the slot's
``timings`` (prompt and generation time of this request, measured by the server). Both streams
were measured on the same server (docs/engines.md#llamacpp).

Request: ``prompt`` as token ids (or text), ``n_predict``, ``ignore_eos``, ``seed``, greedy as
``temperature`` 0 (llama.cpp then samples greedily); for sampling, llama.cpp's default truncations
(top_k 40, min_p 0.05) are turned off (``top_k`` 0, ``min_p`` 0) so only temperature/top_p apply,
as on the other engines. ``response_fields`` trims the last event (it would echo the prompt and
every generation setting).
"""
from __future__ import annotations

from typing import Any

from backends.http.protocol import (UNKNOWN_ID, BadEvent, Done, Parsed, Protocol, bad_event, decode_event, int_ids, obj,
                                    opt_int, opt_str, token_event)
from backends.http.sse import RawEvent
from core.records import GenerationRequest

# llama.cpp stop_type -> the OpenAI-style finish reason the tool uses
FINISH = {"limit": "length", "eos": "stop", "word": "stop", "none": None}
FINAL_FIELDS = ["content", "tokens", "stop", "stop_type", "tokens_predicted", "tokens_evaluated",
                "tokens_cached", "truncated", "timings"]


def completion_payload(req: GenerationRequest, model: str = "") -> dict[str, Any]:
    if req.prompt_token_ids is not None:
        prompt: Any = list(req.prompt_token_ids)
    elif req.prompt_text is not None:
        prompt = req.prompt_text
    else:
        raise ValueError("/completion takes prompt ids or text; render messages with the chat template first")
    p: dict[str, Any] = {"prompt": prompt, "n_predict": req.max_tokens, "stream": True, "return_tokens": True,
                         "temperature": req.temperature, "response_fields": FINAL_FIELDS}
    if req.temperature > 0:
        p.update(top_p=req.top_p, top_k=0, min_p=0.0)
    if req.ignore_eos:
        p["ignore_eos"] = True
    if req.seed is not None:
        p["seed"] = req.seed
    return p


def unary_payload(req: GenerationRequest, model: str = "") -> dict[str, Any]:
    """The same request, not streamed: llama-server then answers once, and that answer's ``tokens``
    are every sampled id (server-context.cpp ``send_final_response``: ``slot.generated_tokens``),
    including a token whose text ends inside a UTF-8 character, which the stream never sends."""
    return {**completion_payload(req, model), "stream": False}


def unary_token_ids(body: Any) -> tuple[int, ...]:
    """The ``tokens`` of a non-streamed /completion answer (BadEvent when it has none)."""
    if not isinstance(body, dict) or body.get("tokens") is None:
        raise BadEvent("a /completion answer without 'tokens' (return_tokens)")
    return int_ids(body["tokens"], "tokens")


def timing_metrics(t: dict[str, Any]) -> dict[str, float]:
    """llama-server's per-request ``timings`` -> engine_metrics (seconds, token counts)."""
    out: dict[str, float] = {}
    for key, name, scale in (("prompt_ms", "prefill_s", 1e-3), ("predicted_ms", "decode_s", 1e-3),
                             ("prompt_n", "prompt_processed_tokens", 1.0), ("cache_n", "prompt_cached_tokens", 1.0),
                             ("predicted_n", "num_generation_tokens", 1.0)):
        v = t.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out[name] = float(v) * scale
    return out


class LlamaCppStream:
    """One /completion stream: the server's generated-token count so far and, from its last event,
    the server's timings of this request.

    A token whose text ends inside a UTF-8 character is never sent on its own: llama-server sends
    nothing for that step, and the next event carries only the next token's id while its
    ``tokens_predicted`` has grown by two (server-context.cpp ``process_token``). The count keeps
    it exact: the missing token is placed before the known one, in the same event, with the unknown
    id -1 (its bytes are in this event's text). Tokens still held when the generation ends are
    never sent: the last event's count adds them, ids -1, at its stamp."""

    __slots__ = ("n", "timings")

    def __init__(self) -> None:
        self.n = 0
        self.timings: dict[str, Any] = {}

    def engine_metrics(self) -> dict[str, float]:
        return timing_metrics(self.timings)

    def feed(self, raw: RawEvent) -> list[Parsed]:
        ev, out = decode_event(raw)  # llama-server: {"error": {"code": .., "message": .., "type": ..}}
        if ev is None:
            return out
        try:
            ids = int_ids(ev["tokens"], "tokens") if ev.get("tokens") is not None else ()
            n = opt_int(ev.get("tokens_predicted"), "tokens_predicted")
            stop = ev.get("stop") is True
            if n is not None and not stop:
                held = n - self.n - len(ids)
                if ids and held > 0:
                    ids = (UNKNOWN_ID,) * held + ids
                self.n = n
            if ids:
                out.append(token_event(raw.t_ns, ids, opt_str(ev.get("content"), "content") or ""))
            if stop:
                if n is not None and n > self.n + len(ids):
                    # the last token(s) ended inside a UTF-8 character: never streamed, counted here
                    out.append(token_event(raw.t_ns, (UNKNOWN_ID,) * (n - self.n - len(ids)), ""))
                stop_type = opt_str(ev.get("stop_type"), "stop_type")
                self.timings.update(obj(ev.get("timings"), "timings"))
                if ev.get("tokens_cached") is not None:
                    self.timings["tokens_cached"] = opt_int(ev.get("tokens_cached"), "tokens_cached")
                out.append(Done(finish_reason=FINISH.get(stop_type, stop_type) if stop_type else None,
                                prompt_tokens=opt_int(ev.get("tokens_evaluated"), "tokens_evaluated"),
                                completion_tokens=n, terminal=True))
            return out
        except BadEvent as e:
            return [bad_event(raw, e)]


COMPLETION = Protocol(name="llamacpp", path="/completion", build_payload=completion_payload,
                      stream_parser=LlamaCppStream, prompt="ids_or_text", info_path="/props",
                      token_id_prompts=True, forced_output_length=True, terminated_by_done=True)
