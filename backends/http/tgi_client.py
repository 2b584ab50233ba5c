"""TGI through Hugging Face's own Python client, the ``text-generation`` package (``AsyncClient``).

Two clients can stream from a TGI server (``--native tgi.client=NAME``):

- ``stamped`` (default): our SSE reader (backends/http/sse.py), the same code path as every other
  HTTP backend; each event carries the kernel's receive time of the socket read that held it.
- ``text-generation``: the package's ``AsyncClient.generate_stream``; each event is stamped when
  the package hands over its parsed ``StreamResponse`` (user space, after aiohttp's line reader
  and pydantic), and the package opens one connection per request.

``compare calibrate --protocol tgi --client NAME`` measures both against a server with known send
times (docs/benchmarks.md); the default is the one with the smaller timing error. The package is
also used where timing does not matter: ``/info`` and ``/health`` over its aiohttp transport,
parameter validation with its ``Parameters`` model (TGI's own rules, checked before sending) and
single non-streaming requests (``generate_once``).
"""
from __future__ import annotations

import time
from typing import Any, AsyncIterator

from core.errors import BackendRequestError, FailureKind
from core.records import GenerationRequest, StreamEnd, StreamItem
from backends.http.protocol import token_event
from backends.http.tgi import FINISH, generate_payload

TGI_CLIENTS = ("stamped", "text-generation")
DEFAULT_TGI_CLIENT = "stamped"
CLIENT_NOTES = {
    "stamped": "our SSE reader: events stamped with the kernel's receive time, one keep-alive pool; the "
               "smaller timing error in `compare calibrate --protocol tgi` (docs/benchmarks.md), hence the default",
    "text-generation": "Hugging Face's text-generation AsyncClient: events stamped when the package yields them "
                       "(after its parsing), a new connection per request; --native tgi.client=stamped is more accurate",
}
EVENT_CLOCK = {"source": "user: perf_counter_ns when text-generation's AsyncClient yielded the parsed StreamResponse",
               "reader": "aiohttp (one session per request, as the package does)"}


def _package() -> Any:
    try:
        import text_generation
    except ImportError:
        raise BackendRequestError(FailureKind.CONNECT, "--native tgi.client=text-generation needs the "
                                  "text-generation package: pip install text-generation") from None
    return text_generation


def _kind(e: BaseException) -> FailureKind:
    """The package's exception -> the failure kind (its errors mirror TGI's error_type)."""
    from text_generation import errors

    table = {errors.OverloadedError: FailureKind.OVERLOADED, errors.RateLimitExceededError: FailureKind.OVERLOADED,
             errors.ValidationError: FailureKind.VALIDATION, errors.BadRequestError: FailureKind.VALIDATION,
             errors.GenerationError: FailureKind.GENERATION, errors.IncompleteGenerationError: FailureKind.DISCONNECTED,
             errors.ShardNotReadyError: FailureKind.GENERATION, errors.ShardTimeoutError: FailureKind.TIMEOUT}
    for cls, kind in table.items():
        if isinstance(e, cls):
            return kind
    if isinstance(e, errors.UnknownError) and str(e).startswith("Incomplete generation"):
        # TGI 3.3 streams error_type incomplete_generation_stream, which the package does not know
        return FailureKind.DISCONNECTED
    import aiohttp

    if isinstance(e, aiohttp.ClientConnectorError):
        return FailureKind.CONNECT
    if isinstance(e, (aiohttp.ClientError, ConnectionError)):
        return FailureKind.READ
    return FailureKind.PROTOCOL


def client_kwargs(req: GenerationRequest) -> dict[str, Any]:
    """The AsyncClient keyword arguments for a request: the same parameters as our payload
    (backends/http/tgi.py: greedy is do_sample=false without temperature; any seed, 0 included)."""
    body = generate_payload(req)
    p = body["parameters"]
    kw: dict[str, Any] = {"prompt": body["inputs"], "max_new_tokens": p["max_new_tokens"], "do_sample": p["do_sample"]}
    for ours, theirs in (("temperature", "temperature"), ("top_p", "top_p"), ("seed", "seed"),
                         ("top_n_tokens", "top_n_tokens")):
        if ours in p:
            kw[theirs] = p[ours]
    return kw


def validate(req: GenerationRequest) -> None:
    """TGI's parameter rules as the package encodes them (its ``Parameters`` model), before sending."""
    tg = _package()
    kw = client_kwargs(req)
    kw.pop("prompt")
    try:
        tg.types.Parameters(**kw)
    except (tg.errors.ValidationError, ValueError) as e:
        raise BackendRequestError(FailureKind.VALIDATION, f"text-generation refused the parameters: {e}") from None


async def stream(base_url: str, req: GenerationRequest, headers: dict[str, str] | None = None,
                 timeout_s: float = 600.0) -> AsyncIterator[StreamItem]:
    """TokenEvent... StreamEnd through ``AsyncClient.generate_stream`` (POST /generate_stream)."""
    tg = _package()
    try:
        kw = client_kwargs(req)
    except ValueError as e:
        raise BackendRequestError(FailureKind.PROMPT, str(e)) from None
    # the package POSTs to its base_url as given: the streaming route itself (TGI's compat route at
    # the root runs the same handler; the calibration server speaks only /generate_stream)
    client = tg.AsyncClient(base_url.rstrip("/") + "/generate_stream", headers=headers, timeout=int(timeout_s))
    finish = prompt_tokens = completion_tokens = None
    done = False
    try:
        async for r in client.generate_stream(**kw):
            t = time.perf_counter_ns()
            tok = r.token
            tops = ({int(x.id): float(x.logprob) for x in r.top_tokens if x.logprob is not None},) if r.top_tokens else None
            # a special token streams with its text (e.g. "</s>"), which is not output text
            yield token_event(t, (int(tok.id),), "" if tok.special else (tok.text or ""),
                              (float(tok.logprob),) if tok.logprob is not None else None, tops)
            if r.details is not None or r.generated_text is not None:
                done = True
                if r.details is not None:
                    reason = getattr(r.details.finish_reason, "value", r.details.finish_reason)
                    finish, completion_tokens = FINISH.get(reason, reason), r.details.generated_tokens
    except BackendRequestError:
        raise
    except Exception as e:  # the package raises its own types, aiohttp's and pydantic's
        raise BackendRequestError(_kind(e), f"text-generation: {type(e).__name__}: {e}") from None
    if not done:
        raise BackendRequestError(FailureKind.DISCONNECTED, "stream closed before the last token's details "
                                  "(text-generation client)")
    yield StreamEnd(t_ns=time.perf_counter_ns(), finish_reason=finish, prompt_tokens=prompt_tokens,
                    completion_tokens=completion_tokens)


async def generate_once(base_url: str, req: GenerationRequest, headers: dict[str, str] | None = None,
                        timeout_s: float = 600.0) -> dict[str, Any]:
    """One non-streaming request: {"text", "token_ids", "logprobs", "top", "finish_reason"} ("top": per
    token {id: logprob} of the top_n_tokens alternatives, empty when not asked for). The package
    POSTs ``"stream": false`` to the server's root (TGI's compat route), whose answer is a
    one-element array of /generate's response (what it reads); /generate itself answers one object."""
    tg = _package()
    client = tg.AsyncClient(base_url.rstrip("/") + "/", headers=headers, timeout=int(timeout_s))
    kw = client_kwargs(req)
    try:
        r = await client.generate(**kw)
    except Exception as e:  # as in stream()
        raise BackendRequestError(_kind(e), f"text-generation: {type(e).__name__}: {e}") from None
    tokens = r.details.tokens if r.details is not None else []
    reason = getattr(r.details.finish_reason, "value", None) if r.details is not None else None
    tops = (r.details.top_tokens or []) if r.details is not None else []
    return {"text": r.generated_text, "token_ids": [int(t.id) for t in tokens],
            "logprobs": [t.logprob for t in tokens], "finish_reason": FINISH.get(reason, reason),
            "top": [{int(x.id): float(x.logprob) for x in step if x.logprob is not None} for step in tops]}


async def get_json(base_url: str, path: str, headers: dict[str, str] | None = None,
                   timeout_s: float = 10.0) -> tuple[int, Any]:
    """(status, JSON or None) of a GET over the package's transport (aiohttp): /info, /health."""
    import aiohttp

    async with aiohttp.ClientSession(headers=headers, timeout=aiohttp.ClientTimeout(timeout_s)) as s:
        async with s.get(base_url.rstrip("/") + path) as r:
            try:
                body = await r.json(content_type=None)
            except ValueError:
                body = None
            return r.status, body
