"""Keep-alive pool of our streaming transport against a real loopback server that closes
connections the way servers do (idle timeout; closing a kept-alive connection as a new request
arrives). Before the fix, a pool gone stale between load levels failed requests with
"no usable connection"."""
from __future__ import annotations

import asyncio

import httpx

from backends.http.transport import StreamingTransport


class KeepAliveServer:
    """HTTP/1.1 with keep-alive: answers each request with a small chunked body, then keeps the
    connection open ``idle_s`` (None: forever); with ``drop_reused`` it closes a connection,
    unanswered, when a second request arrives on it (the idle-timeout race seen from the client)."""

    def __init__(self, idle_s: float | None, drop_reused: bool = False) -> None:
        self.idle_s, self.drop_reused = idle_s, drop_reused
        self.connections = 0
        self.answered = 0
        self.dropped = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        served = 0
        try:
            while True:
                try:
                    await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.idle_s)
                except (asyncio.TimeoutError, asyncio.IncompleteReadError):
                    return  # idle timeout or client gone: close
                if served and self.drop_reused:
                    self.dropped += 1
                    return
                body = b"data: hello\n\n"
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                             b"transfer-encoding: chunked\r\n\r\n%x\r\n%b\r\n0\r\n\r\n" % (len(body), body))
                await writer.drain()
                served += 1
                self.answered += 1
        finally:
            writer.close()

    async def __aenter__(self) -> "KeepAliveServer":
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()


async def _batch(client: httpx.AsyncClient, url: str, n: int) -> list[bytes]:
    async def one() -> bytes:
        async with client.stream("POST", url, content=b"{}") as r:
            return b"".join([c async for c in r.aiter_raw()])
    return await asyncio.gather(*[one() for _ in range(n)])


def test_pool_gone_stale_between_levels_is_not_an_error():
    async def main():
        async with KeepAliveServer(idle_s=0.1) as srv:
            async with httpx.AsyncClient(transport=StreamingTransport()) as client:
                first = await _batch(client, srv.url, 6)
                await asyncio.sleep(0.4)  # the server has closed every idle connection
                second = await _batch(client, srv.url, 6)
        return srv, first + second

    srv, bodies = asyncio.run(main())
    assert bodies == [b"data: hello\n\n"] * 12
    assert srv.answered == 12 and srv.connections == 12  # stale ones were replaced, not reused


def test_connections_are_reused_while_alive():
    async def main():
        async with KeepAliveServer(idle_s=None) as srv:
            async with httpx.AsyncClient(transport=StreamingTransport()) as client:
                for _ in range(3):
                    await _batch(client, srv.url, 4)
        return srv

    srv = asyncio.run(main())
    assert srv.answered == 12 and srv.connections == 4


def test_reused_connection_closed_as_the_request_arrives_is_retried_on_a_new_one():
    async def main():
        async with KeepAliveServer(idle_s=None, drop_reused=True) as srv:
            async with httpx.AsyncClient(transport=StreamingTransport()) as client:
                await _batch(client, srv.url, 3)
                again = await _batch(client, srv.url, 3)
        return srv, again

    srv, again = asyncio.run(main())
    assert again == [b"data: hello\n\n"] * 3
    # each reused connection was closed by the server; the request went out again on a new one
    assert srv.dropped == 3 and srv.answered == 6 and srv.connections == 6
