"""What a wire protocol is: two pure functions plus where to send and how to check health.

``build_payload(request, model) -> dict``: the JSON body for one GenerationRequest.
``parse_event(raw) -> list[TokenEvent | Done | Error]``: one SSE event -> what it means
(empty list for events that carry nothing, e.g. the chat role chunk). A single event may carry
tokens AND the finish reason (OpenAI's last chunk), hence a list.

Token counting: tokens are counted from the token ids the server streams (vLLM
``return_token_ids``, TGI ``token.id``) or from logprob entries; several tokens in one event are
several tokens sharing the event's timestamp (compare/metrics.py gives the gap to the first and
0 to the others). When a server streams neither, each non-empty event counts as one token and
its ids are ``-1`` placeholders (``UNKNOWN_ID``); the server's ``usage`` total is kept beside it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from backends.base import GenerationRequest, TokenEvent
from backends.http.sse import RawEvent

UNKNOWN_ID = -1


@dataclass(frozen=True, slots=True)
class Done:
    """End-of-generation information. ``terminal``: the stream is complete after this event."""

    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    terminal: bool = False


@dataclass(frozen=True, slots=True)
class Error:
    """An error the server reported inside a 200 stream (TGI does this for every error)."""

    kind: str  # same kinds as backends.http.sse (validation, overloaded, generation, ...)
    message: str


Parsed = TokenEvent | Done | Error


@dataclass(frozen=True)
class Protocol:
    name: str
    path: str  # POST endpoint, relative to the base URL
    build_payload: Callable[[GenerationRequest, str], dict[str, Any]]
    parse_event: Callable[[RawEvent], list[Parsed]]
    # what prompts the wire format takes: "ids_or_text" (completions), "text" (TGI), "messages" (chat)
    prompt: str
    info_path: str | None  # GET for server identity (/v1/models, /info)
    health_path: str = "/health"
    token_id_prompts: bool = False
    forced_output_length: bool = False  # the server honours ignore_eos
    terminated_by_done: bool = True  # the stream must end with a terminal Done


def protocols() -> dict[str, Protocol]:
    from backends.http import openai, tgi

    return {p.name: p for p in (openai.COMPLETIONS, openai.CHAT, tgi.GENERATE_STREAM)}


def get_protocol(name: str) -> Protocol:
    table = protocols()
    if name not in table:
        raise ValueError(f"unknown HTTP protocol {name!r}; known: {', '.join(sorted(table))}")
    return table[name]
