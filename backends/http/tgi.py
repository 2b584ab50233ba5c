"""TGI native protocol: ``POST /generate_stream`` (text-generation-inference 3.x).

Quirks honoured (router/src/validation.rs, server.rs, infer/mod.rs of TGI v3.3.7; each with its row
in adapters/facts/tgi-v3.3.7.json):
- greedy is ``do_sample: false`` with NO temperature/top_p: TGI rejects temperature 0
  ("must be strictly positive") and top_p 1 ("must be > 0.0 and < 1.0"); top_p is sent only
  when 0 < top_p < 1;
- ``seed``: any u64, 0 included (validation.rs; only the OpenAPI annotation says >= 1), sent
  whenever sampling so a seeded run is reproducible;
- no ignore_eos: output length cannot be forced (capability forced_output_length=False), so
  comparisons must use length-matched tokens;
- prompts are text only (no token-id prompts);
- special tokens stream with their text (``token.special`` true, text e.g. ``</s>``: the server
  decodes tokens with skip_special_tokens=False); their text is not output text, as in TGI's own
  ``generated_text``;
- errors: ``/generate_stream`` answers 200 and sends ``data:{"error":..,"error_type":..}``
  (validation / overloaded / generation / incomplete_generation_stream when the stream ended
  without its last event); non-streaming routes and body deserialisation failures use HTTP 422 /
  424 / 429 / 500.
"""
from __future__ import annotations

from typing import Any

from core.errors import FailureKind
from core.records import GenerationRequest
from backends.http.protocol import (FAST_TGI, BadEvent, Done, Error, Parsed, Protocol, bad_event, decode_event, number,
                                    obj as _obj, objects, opt_int, opt_str, token_event)
from backends.http.sse import RawEvent, snippet

# TGI FinishReason -> the OpenAI-style reason the rest of the tool uses
FINISH = {"length": "length", "eos_token": "stop", "stop_sequence": "stop"}
# TGI's error_type -> the failure kind
ERROR_KIND = {"validation": FailureKind.VALIDATION, "overloaded": FailureKind.OVERLOADED,
              "generation": FailureKind.GENERATION, "incomplete_generation_stream": FailureKind.DISCONNECTED,
              "incomplete_generation": FailureKind.DISCONNECTED}  # the latter: non-streaming routes


def generate_payload(req: GenerationRequest, model: str = "") -> dict[str, Any]:
    if req.prompt_text is None:
        raise ValueError("TGI takes text prompts only; detokenize token-id prompts first")
    params: dict[str, Any] = {"max_new_tokens": req.max_tokens, "details": True,
                              "decoder_input_details": False}
    if req.temperature > 0:
        params["do_sample"] = True
        params["temperature"] = req.temperature
        if 0 < req.top_p < 1:
            params["top_p"] = req.top_p
        if req.seed is not None:  # TGI accepts any u64, 0 included (validation.rs)
            params["seed"] = req.seed
    else:
        params["do_sample"] = False
    if req.logprobs:
        params["top_n_tokens"] = req.logprobs
    return {"inputs": req.prompt_text, "parameters": params}


def _error(obj: dict[str, Any]) -> Error:
    etype = obj.get("error_type")
    return Error(ERROR_KIND.get(etype, FailureKind.GENERATION) if type(etype) is str else FailureKind.GENERATION,
                 str(obj["error"]))


def parse_generate_stream(raw: RawEvent) -> list[Parsed]:
    obj, out = decode_event(raw, _error)
    if obj is None:
        return out
    try:
        return _tokens(raw, obj)
    except BadEvent as e:
        return [bad_event(raw, e)]


def _tokens(raw: RawEvent, obj: dict[str, Any]) -> list[Parsed]:
    tok = obj.get("token")
    if not isinstance(tok, dict) or "id" not in tok:
        return [Error(FailureKind.PROTOCOL, f"event has no token: {snippet(raw.data)}")]
    tid = opt_int(tok["id"], "token.id")
    if tid is None:
        raise BadEvent("token.id must be an integer, got null")
    out: list[Parsed] = []
    lp = tok.get("logprob")
    tops = objects(obj.get("top_tokens"), "top_tokens")
    text = opt_str(tok.get("text"), "token.text") or ""
    if tok.get("special") is True:
        text = ""  # TGI streams a special token's text (e.g. "</s>"); generated_text leaves it out
    out.append(token_event(
        raw.t_ns, (tid,), text,
        (number(lp, "token.logprob"),) if lp is not None else None,
        ({opt_int(t.get("id"), "top_tokens[].id"): number(t["logprob"], "top_tokens[].logprob")
          for t in tops if t.get("logprob") is not None},) if tops else None))
    details = _obj(obj.get("details"), "details")
    if obj.get("generated_text") is not None or details:
        reason = opt_str(details.get("finish_reason"), "details.finish_reason")
        out.append(Done(finish_reason=FINISH.get(reason, reason) if reason is not None else None,
                        prompt_tokens=opt_int(details.get("input_length"), "details.input_length"),
                        completion_tokens=opt_int(details.get("generated_tokens"), "details.generated_tokens"),
                        terminal=True))
    return out


GENERATE_STREAM = Protocol(name="tgi", path="/generate_stream", build_payload=generate_payload,
                           parse_event=parse_generate_stream, prompt="text", info_path="/info",
                           fast=FAST_TGI, token_id_prompts=False, forced_output_length=False)
