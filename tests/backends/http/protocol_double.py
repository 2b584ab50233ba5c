"""TEST DOUBLE: a loopback HTTP server speaking every registered wire protocol's stream. NOT a
real engine: it generates token ``100 + i`` for step i, as many as the request's max tokens,
so a client's token count can be checked exactly.

What each route sends is the format's documented shape, with the quirks the parsers exist for:

- ``/v1/completions`` (vLLM): ``token_ids`` per chunk, a finish chunk, a usage chunk, ``[DONE]``;
- ``/v1/completions`` with ``continuous_usage_stats`` (trtllm-serve 1.0-1.2.0): a FRESH random
  ``id`` in every chunk, cumulative usage in every chunk, text only (one chunk with empty text:
  a partial UTF-8 character), or ``token_ids`` with ``detokenize: false``;
- ``/v1/chat/completions``: a role chunk, then deltas with ``token_ids``;
- ``/generate_stream`` (TGI): one token per event, ``details`` in the last;
- ``/completion`` (llama-server): ``tokens`` and ``tokens_predicted``; step 2 sends nothing (its
  text ended inside a UTF-8 character) and step 3 carries only its own id; the last event
  (``stop: true``) carries the count and ``timings``.
"""
from __future__ import annotations

import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

PROMPT_TOKENS = 3


def _openai(body: dict[str, Any], chat: bool) -> Iterator[dict[str, Any] | str]:
    n = body["max_tokens"]
    so = body.get("stream_options") or {}
    if so.get("continuous_usage_stats"):  # trtllm-serve
        ids = body.get("detokenize") is False
        for i in range(1, n + 1):
            ch: dict[str, Any] = {"index": 0, "text": "" if ids or i == 2 else f"t{i}",
                                  "finish_reason": "length" if i == n else None}
            if ids:
                ch["token_ids"] = [100 + i]
            yield {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "choices": [ch],
                   "usage": {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": i, "total_tokens": PROMPT_TOKENS + i}}
        yield {"id": f"cmpl-{uuid.uuid4().hex}", "choices": [],
               "usage": {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": n, "total_tokens": PROMPT_TOKENS + n}}
        yield "[DONE]"
        return
    cid = f"cmpl-{uuid.uuid4().hex}"
    if chat:
        yield {"id": cid, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
    for i in range(1, n + 1):
        ch = ({"index": 0, "delta": {"content": f"t{i}"}} if chat else {"index": 0, "text": f"t{i}"})
        ch.update(token_ids=[100 + i], finish_reason="length" if i == n else None)
        yield {"id": cid, "choices": [ch]}
    yield {"id": cid, "choices": [], "usage": {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": n,
                                               "total_tokens": PROMPT_TOKENS + n}}
    yield "[DONE]"


def _tgi(body: dict[str, Any]) -> Iterator[dict[str, Any]]:
    n = body["parameters"]["max_new_tokens"]
    for i in range(1, n + 1):
        ev: dict[str, Any] = {"index": i, "token": {"id": 100 + i, "text": f"t{i}", "logprob": -0.5, "special": False},
                              "generated_text": None, "details": None}
        if i == n:
            ev["generated_text"] = "".join(f"t{k}" for k in range(1, n + 1))
            ev["details"] = {"finish_reason": "length", "generated_tokens": n, "input_length": PROMPT_TOKENS}
        yield ev


def _llamacpp(body: dict[str, Any]) -> Iterator[dict[str, Any]]:
    n = body["n_predict"]
    for i in range(1, n + 1):
        if i == 2 and n > 2:
            continue  # the token's text ended inside a UTF-8 character: nothing sent for it
        yield {"content": f"t{i}", "tokens": [100 + i], "stop": False, "tokens_predicted": i}
    yield {"content": "", "tokens": [], "stop": True, "stop_type": "limit", "tokens_predicted": n,
           "tokens_evaluated": PROMPT_TOKENS, "tokens_cached": 0,
           "timings": {"prompt_n": PROMPT_TOKENS, "prompt_ms": 1.25, "predicted_n": n, "predicted_ms": 2.5, "cache_n": 0}}


ROUTES = {"/v1/completions": lambda b: _openai(b, False), "/v1/chat/completions": lambda b: _openai(b, True),
          "/generate_stream": _tgi, "/completion": _llamacpp}
INFO = {"/v1/models": {"object": "list", "data": [{"id": "double", "object": "model"}]},
        "/info": {"model_id": "double", "version": "double"}, "/props": {"build_info": "double", "total_slots": 4},
        "/health": {"status": "ok"}}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        if self.path in INFO:
            self._send(200, json.dumps(INFO[self.path]).encode())
        else:
            self._send(404, b'{"error":"not found"}')

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        route = ROUTES.get(self.path)
        if route is None:
            self._send(404, b'{"error":"not found"}')
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for ev in route(body):
            data = ev if isinstance(ev, str) else json.dumps(ev, separators=(",", ":"))
            chunk = f"data: {data}\n\n".encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class ProtocolDouble:
    """``with ProtocolDouble() as url``: the double on 127.0.0.1 (a free port), in a thread."""

    def __enter__(self) -> str:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)
