"""Which model an already running server serves: asked before a run is built.

``compare run --backends openai@URL`` without ``--model``: the run's model is the one the server
answers with, never a default of ours. OpenAI-compatible servers (vLLM, SGLang, trtllm-serve) list
it at ``GET /v1/models`` (``data[0].id``; vLLM adds ``max_model_len``); TGI at ``GET /info``
(``model_id``, ``max_input_tokens``, ``max_total_tokens``).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import httpx

from core.errors import UserError
from backends.http.urls import redact_url, split_userinfo
from backends.http_backends import API_KEY_ENV

# backend name (before '@') of an already running server -> where it says what it serves
INFO_PATHS = {"openai": "/v1/models", "openai-chat": "/v1/models", "trtllm": "/v1/models", "tgi": "/info"}


@dataclass(frozen=True)
class ServedModel:
    backend: str  # display name, credentials masked
    url: str  # base URL, credentials masked
    model: str  # the served name: data[0].id or model_id
    max_model_len: int | None  # prompt + output tokens the server allows (TGI: max_total_tokens)
    max_input_tokens: int | None = None  # TGI only

    @property
    def source(self) -> str:
        return f"served by {self.url}"

    def as_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "url": self.url, "model": self.model, "source": self.source,
                "max_model_len": self.max_model_len, "max_input_tokens": self.max_input_tokens}


def endpoint(name: str) -> tuple[str, str] | None:
    """(kind, URL) when ``name`` is an already running server (``openai@http://...``), else None."""
    base, _, target = name.partition("@")
    base, target = base.strip(), target.strip()
    if base in INFO_PATHS and target.startswith(("http://", "https://")):
        return base, target
    return None


def _int(v: Any) -> int | None:
    return v if type(v) is int and v > 0 else None


def served_model(name: str, timeout_s: float = 10.0) -> ServedModel:
    """Ask the server behind ``name`` what it serves; one-line :class:`UserError` when it cannot say."""
    found = endpoint(name)
    if found is None:
        raise ValueError(f"{name} is not an already running server")
    kind, raw_url = found
    url, basic = split_userinfo(raw_url.rstrip("/"))
    shown = redact_url(raw_url.rstrip("/"))
    headers = {}
    if os.environ.get(API_KEY_ENV):
        headers["Authorization"] = f"Bearer {os.environ[API_KEY_ENV]}"
    elif basic:
        headers["Authorization"] = basic
    path = INFO_PATHS[kind]
    fix = "start the server, fix the URL, or pass --model NAME"
    try:
        r = httpx.get(url + path, headers=headers, timeout=httpx.Timeout(timeout_s))
    except httpx.HTTPError as e:
        raise UserError(f"cannot ask {shown}{path} which model it serves ({type(e).__name__}); {fix}") from None
    if r.status_code != 200:
        raise UserError(f"{shown}{path} answered HTTP {r.status_code} when asked which model it serves; {fix}")
    try:
        body = r.json()
    except ValueError:
        body = None
    if kind == "tgi":
        if not isinstance(body, dict) or not isinstance(body.get("model_id"), str) or not body["model_id"]:
            raise UserError(f"{shown}/info names no model_id; is this a TGI server? ({fix})")
        return ServedModel(redact_url(name), shown, body["model_id"], _int(body.get("max_total_tokens")),
                           _int(body.get("max_input_tokens")))
    data = body.get("data") if isinstance(body, dict) else None
    models = [m for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)] if isinstance(data, list) else []
    if not models:
        raise UserError(f"{shown}/v1/models lists no model; is this an OpenAI-compatible server? ({fix})")
    return ServedModel(redact_url(name), shown, models[0]["id"], _int(models[0].get("max_model_len")))
