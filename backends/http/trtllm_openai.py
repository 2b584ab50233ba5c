"""trtllm-serve's OpenAI completions stream: the chunks of ``openai`` with their tokens counted
from what trtllm-serve streams instead of vLLM's ``return_token_ids``.

trtllm-serve's CompletionRequest is ``extra="forbid"`` (serve/openai_protocol.py): vLLM's
``return_token_ids`` would be a 400, so it is not sent. Tokens per chunk come, in this order, from:

1. ``token_ids`` of the choice (streamed with ``detokenize: false``, a TRT-LLM CompletionRequest
   field): exact ids;
2. the growth of ``usage.completion_tokens`` since this stream's previous chunk
   (``stream_options.continuous_usage_stats``: a cumulative count in every chunk), so a chunk whose
   text is empty (a partial UTF-8 character) still counts, and one whose text only completes an
   earlier token's bytes adds none;
3. neither: a chunk with text is one token (the reader's documented fallback).

The running count lives in the stream's parser, never keyed on the chunk ``id``: trtllm-serve
gives every streamed chunk a fresh random id in the releases this tool targets (1.0, 1.1, 1.2.0),
so a count keyed on it would add each chunk's whole running total (8 one-token chunks: 36).
"""
from __future__ import annotations

from typing import Any, Callable

from core.records import GenerationRequest
from backends.http.openai import completions_payload, parse_envelope
from backends.http.protocol import (UNKNOWN_ID, BadEvent, Done, Parsed, Protocol, bad_event, int_ids, obj, objects,
                                    opt_int, opt_str, token_event)
from backends.http.sse import RawEvent

def trtllm_payload(detokenize: bool = True) -> Callable[[GenerationRequest, str], dict[str, Any]]:
    """The completions body trtllm-serve takes: no ``return_token_ids``; continuous usage (the
    per-chunk count); ``detokenize: false`` when ids are to be streamed instead of text."""
    def build(req: GenerationRequest, model: str) -> dict[str, Any]:
        p = completions_payload(req, model)
        p.pop("return_token_ids", None)
        p["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
        if not detokenize:
            p["detokenize"] = False
        return p
    return build


class TrtllmStream:
    """One trtllm-serve completions stream: the cumulative completion count seen so far."""

    __slots__ = ("counted",)

    def __init__(self) -> None:
        self.counted = 0  # usage.completion_tokens of this stream's last chunk that carried it

    def engine_metrics(self) -> dict[str, float]:
        return {}

    def feed(self, raw: RawEvent) -> list[Parsed]:
        ev, out = parse_envelope(raw)
        if ev is None:
            return out
        try:
            usage = obj(ev.get("usage"), "usage")
            total = opt_int(usage.get("completion_tokens"), "usage.completion_tokens")
            grown = max(total - self.counted, 0) if total is not None else 0
            for ch in objects(ev.get("choices"), "choices"):
                ids = int_ids(ch["token_ids"]) if ch.get("token_ids") is not None else ()
                text = opt_str(ch.get("text"), "text") or ""
                if not ids:
                    if total is not None:
                        ids = (UNKNOWN_ID,) * grown
                        grown = 0  # n=1: one choice takes the chunk's growth
                    elif text:
                        ids = (UNKNOWN_ID,)
                if ids:
                    out.append(token_event(raw.t_ns, ids, text))
                reason = opt_str(ch.get("finish_reason"), "finish_reason")
                if reason:
                    out.append(Done(finish_reason=reason))
            if total is not None:
                self.counted = max(self.counted, total)
                out.append(Done(prompt_tokens=opt_int(usage.get("prompt_tokens"), "usage.prompt_tokens"),
                                completion_tokens=total))
            return out
        except BadEvent as e:
            return [bad_event(raw, e)]


def _protocol(name: str, detokenize: bool) -> Protocol:
    return Protocol(name=name, path="/v1/completions", build_payload=trtllm_payload(detokenize),
                    stream_parser=TrtllmStream, prompt="ids_or_text", info_path="/v1/models",
                    token_id_prompts=True, forced_output_length=True)


# by name, so a client process rebuilds either from the name alone (the payload differs)
TEXT = _protocol("trtllm-openai", True)
IDS = _protocol("trtllm-openai-ids", False)


def trtllm_protocol(detokenize: bool = True) -> Protocol:
    return TEXT if detokenize else IDS
