"""A raw HTTP/1.1 server on loopback for fault tests: it sends exactly the bytes a test scripts
(split points, delays, bad statuses, dying mid-stream), which no well-behaved framework would."""
from __future__ import annotations

import asyncio
from typing import Awaitable, Callable

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class RawHttpServer:
    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.server: asyncio.AbstractServer | None = None
        self.url = ""

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.decode("latin-1").split("\r\n"):
                k, _, v = line.partition(":")
                if k.lower() == "content-length":
                    length = int(v)
            if length:
                await reader.readexactly(length)
            await self.handler(reader, writer)
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


def silent_response() -> Handler:
    """Headers, then nothing: the client must time out, not hang."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(30)

    return handler
