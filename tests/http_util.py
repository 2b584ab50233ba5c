"""A raw HTTP/1.1 server on loopback for fault tests: it sends exactly the bytes a test scripts
(split points, delays, bad statuses, dying mid-stream), which no well-behaved framework would."""
from __future__ import annotations

import asyncio
import json
import threading
from typing import Awaitable, Callable

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class RawHttpServer:
    """``routes``: "METHOD /path" -> a handler for that request line; anything else -> ``handler``."""

    def __init__(self, handler: Handler, routes: dict[str, Handler] | None = None) -> None:
        self.handler = handler
        self.routes = routes or {}
        self.server: asyncio.AbstractServer | None = None
        self.url = ""
        self.requests = 0
        self.heads: list[bytes] = []  # every request's head, in arrival order

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            self.requests += 1
            self.heads.append(head)
            method, path = (head.split(b"\r\n", 1)[0].decode("latin-1").split(" ") + ["", ""])[:2]
            length = 0
            for line in head.decode("latin-1").split("\r\n"):
                k, _, v = line.partition(":")
                if k.lower() == "content-length":
                    length = int(v)
            if length:
                await reader.readexactly(length)
            await self.routes.get(f"{method} {path}", self.handler)(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def __aenter__(self) -> "RawHttpServer":
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


def sse_response(chunks: list[bytes], delay_s: float = 0.0, status: str = "200 OK",
                 ctype: str = "text/event-stream", close_early: bool = False) -> Handler:
    """Chunked response writing each element as one chunk, ``delay_s`` apart."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(f"HTTP/1.1 {status}\r\ncontent-type: {ctype}\r\ntransfer-encoding: chunked\r\n\r\n".encode())
        for i, c in enumerate(chunks):
            if i and delay_s:
                await asyncio.sleep(delay_s)
            writer.write(b"%x\r\n%b\r\n" % (len(c), c))
            await writer.drain()
        if not close_early:
            writer.write(b"0\r\n\r\n")
            await writer.drain()

    return handler


def status_response(status: str, body: bytes, ctype: str = "application/json") -> Handler:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(f"HTTP/1.1 {status}\r\ncontent-type: {ctype}\r\ncontent-length: {len(body)}\r\n\r\n".encode() + body)
        await writer.drain()

    return handler


def hang() -> Handler:
    """Accept the request, answer nothing (a hung server)."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(3600)

    return handler


def silent_response() -> Handler:
    """Headers, then nothing: the client must time out, not hang."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(30)

    return handler


class ThreadedServer:
    """A RawHttpServer on its own event loop in a thread: for a `compare` subprocess to talk to.
    ``stop_listening()`` closes the listening socket (a server that died: connections are refused)."""

    def __init__(self, handler: Handler, routes: dict[str, Handler] | None = None) -> None:
        self.raw = RawHttpServer(handler, routes)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> "ThreadedServer":
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.raw.__aenter__(), self.loop).result(10)
        return self

    @property
    def url(self) -> str:
        return self.raw.url

    def stop_listening(self) -> None:
        async def close() -> None:
            assert self.raw.server is not None
            self.raw.server.close()
        asyncio.run_coroutine_threadsafe(close(), self.loop).result(10)

    def __exit__(self, *exc: object) -> None:
        async def shut() -> None:
            assert self.raw.server is not None
            self.raw.server.close()
            rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in rest:
                t.cancel()
            await asyncio.gather(*rest, return_exceptions=True)
        asyncio.run_coroutine_threadsafe(shut(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def openai_routes(model: str = "m") -> dict[str, Handler]:
    """What the client asks an OpenAI server before streaming: /v1/models, /version."""
    models = json.dumps({"object": "list", "data": [{"id": model, "object": "model"}]}).encode()
    return {"GET /v1/models": status_response("200 OK", models),
            "GET /version": status_response("200 OK", b'{"version": "double"}')}


def openai_stream(tokens: int = 4) -> Handler:
    """A well-behaved /v1/completions stream of ``tokens`` tokens (ids 5, 6, ...), then [DONE]."""
    events = [b"data: " + json.dumps({"choices": [{"index": 0, "text": "t", "token_ids": [5 + i],
                                                   "finish_reason": "length" if i == tokens - 1 else None}]}).encode()
              + b"\n\n" for i in range(tokens)]
    return sse_response(events + [b"data: [DONE]\n\n"])
