"""The ONE Server-Sent-Events reader every HTTP protocol goes through (httpx, async).

Timing rule (identical for every protocol): an event is stamped with ``time.perf_counter_ns()``
taken the moment the chunk holding its FIRST byte is handed to us by the socket layer. Several
events in one chunk share that chunk's stamp (they arrived together); an event split over
several chunks keeps the stamp of its first chunk. Parsing happens after stamping, so JSON
decoding never inflates a latency.

Transport faults become ``BackendRequestError`` with a typed ``kind`` (see ERROR KINDS below).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, AsyncIterator

import httpx

from backends.base import BackendRequestError

# ERROR KINDS raised here (each failed request records exactly one; docs/benchmarks.md#errors):
#   connect       - connection refused / DNS / TLS: the server is not there
#   timeout       - connect, read (no byte for read_timeout) or pool timeout
#   validation    - HTTP 422 (TGI: input validation)          | overloaded - HTTP 429
#   generation    - HTTP 424 (TGI: generation failed)          | http_4xx / http_5xx - other statuses
#   disconnected  - the connection broke or closed mid-stream (server died)
#   protocol      - 200 but not an event stream, or an event we cannot parse
_STATUS_KIND = {422: "validation", 424: "generation", 429: "overloaded"}

_perf = time.perf_counter_ns


@dataclass(frozen=True, slots=True)
class RawEvent:
    """One SSE event as received: ``t_ns`` = first byte seen, fields as sent."""

    t_ns: int
    data: str
    event: str | None = None
    id: str | None = None


def _parse_block(block: bytes, t_ns: int) -> RawEvent | None:
    """One event block (lines without the blank terminator) -> RawEvent; None for comments only."""
    if block.startswith(b"data:") and b"\n" not in block:  # fast path: one data line
        v = block[5:]
        return RawEvent(t_ns, (v[1:] if v[:1] == b" " else v).decode())
    data: list[bytes] = []
    event = eid = None
    for line in block.split(b"\n"):
        if not line or line[:1] == b":":
            continue  # keep-alive comment
        name, _, value = line.partition(b":")
        if value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            data.append(value)
        elif name == b"event":
            event = value.decode()
        elif name == b"id":
            eid = value.decode()
        # "retry" and unknown fields are ignored, as the SSE spec says
    if not data and event is None:
        return None
    return RawEvent(t_ns, b"\n".join(data).decode(), event, eid)


async def iter_events(response: httpx.Response) -> AsyncIterator[RawEvent]:
    """Yield the events of a streaming response, stamped at the first byte of each event."""
    buf = b""
    ev_t = 0
    pending_cr = False
    try:
        async for chunk in response.aiter_raw():
            # stamped on receipt by our transport (backends/http/transport.py), else now
            t = getattr(chunk, "t_ns", 0) or _perf()
            if not buf:
                ev_t = t
            if b"\r" in chunk or pending_cr:  # normalise CRLF / CR line ends (rare: axum, vLLM use LF)
                chunk = (b"\r" if pending_cr else b"") + chunk
                pending_cr = chunk.endswith(b"\r")
                if pending_cr:
                    chunk = chunk[:-1]
                chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            buf += chunk
            while True:
                i = buf.find(b"\n\n")
                if i < 0:
                    break
                block = buf[:i]
                buf = buf[i + 2:]
                ev = _parse_block(block, ev_t) if block else None
                ev_t = t  # any later event in this chunk started in this chunk
                if ev is not None:
                    yield ev
            if buf.strip(b"\n") == b"":
                buf = b""
    except httpx.TimeoutException as e:
        raise BackendRequestError("timeout", f"no data for the read timeout ({type(e).__name__})") from e
    except (httpx.RemoteProtocolError, httpx.ReadError) as e:
        raise BackendRequestError("disconnected", f"stream broke mid-response: {type(e).__name__}: "
                                  f"{_one_line(str(e))}") from e
    if buf.strip():
        # the body ended inside an event: the server died or cut the stream
        raise BackendRequestError("disconnected", f"stream ended inside an event ({len(buf)} bytes unterminated)")


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


def error_message(body: bytes) -> str:
    """The server's error text: JSON {"error": ...} / {"message": ...} / {"detail": ...} or raw."""
    import json

    try:
        obj: Any = json.loads(body)
    except ValueError:
        return _one_line(body.decode(errors="replace"))
    if isinstance(obj, dict):
        err = obj.get("error", obj.get("message", obj.get("detail", obj)))
        if isinstance(err, dict):
            err = err.get("message", err)
        return _one_line(str(err))
    return _one_line(str(obj))


def status_error(status: int, body: bytes) -> BackendRequestError:
    kind = _STATUS_KIND.get(status) or ("http_4xx" if status < 500 else "http_5xx")
    return BackendRequestError(kind, f"HTTP {status}: {error_message(body)}", status=status)


async def post_events(client: httpx.AsyncClient, url: str, payload: dict[str, Any],
                      headers: dict[str, str] | None = None) -> AsyncIterator[RawEvent]:
    """POST ``payload`` as JSON and yield the response's events; every fault is a typed error."""
    try:
        async with client.stream("POST", url, json=payload, headers=headers) as resp:
            if resp.status_code >= 400:
                raise status_error(resp.status_code, (await resp.aread())[:4000])
            ctype = resp.headers.get("content-type", "")
            if "text/event-stream" not in ctype:
                body = (await resp.aread())[:300]
                raise BackendRequestError("protocol", f"expected text/event-stream, got {ctype or 'no content-type'}"
                                          f" (HTTP {resp.status_code}): {_one_line(body.decode(errors='replace'))}",
                                          status=resp.status_code)
            async for ev in iter_events(resp):
                yield ev
    except httpx.ConnectError as e:
        raise BackendRequestError("connect", f"cannot connect to {url}: {_one_line(str(e)) or 'refused'}") from e
    except httpx.TimeoutException as e:
        raise BackendRequestError("timeout", f"{type(e).__name__} on {url}") from e
    except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as e:
        raise BackendRequestError("disconnected", f"{type(e).__name__}: {_one_line(str(e))}") from e
