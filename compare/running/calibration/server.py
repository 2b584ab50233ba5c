"""Client self-check: a loopback streaming server with KNOWN timing, and the measurement of how
well our HTTP client (backends/http, the exact code path of ``compare run``) timestamps it.

The calibration server speaks the OpenAI completions streaming protocol (with vLLM's per-chunk
``token_ids``) and TGI's ``/generate_stream`` over real HTTP/1.1 on 127.0.0.1. It waits ``ttft_ms`` before the first event and
``itl_ms`` between events, each event carrying ``tokens_per_event`` tokens. Every token event
carries, in its SSE ``id:`` field, ``perf_counter_ns()`` taken just before the bytes were written.
perf_counter_ns is CLOCK_MONOTONIC, shared by all processes of a machine, so
``client stamp - server stamp`` is the client's timing error for that event. With kernel receive
stamps (backends/http/rxstamp.py, Linux) that is loopback transit up to the socket, plus, when
one read held several events, the wait for the newest of them; with user-space stamps it also
holds the time the client's event loop took to get to the bytes. Both are reported (the
user-space one from ``RawEvent.rx_ns``), with the clock that stamped the records. That is what
``compare calibrate`` reports (the client side: client.py).

The server is a bare asyncio.Protocol (never the bottleneck) in its own process
(``python -m compare.running.calibration --port N``), pinned to other cores than the client.
"""
from __future__ import annotations

import argparse
import asyncio
import heapq
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from compare.running.calibration import shards

_perf = time.perf_counter_ns


@dataclass(frozen=True)
class CalibrationTiming:
    ttft_ms: float = 20.0
    itl_ms: float = 40.0
    tokens_per_event: int = 1


class _Ticker:
    """Every stream's next event in ONE time wheel (lists per millisecond) with one loop timer.

    Why: at 50,000 events/s the server must not be the bottleneck, and it runs on one core. A
    loop timer per event (``call_at``) cost more than the event's write; a heap entry per event
    still cost ~1 us. The loop's timers have 1 ms resolution anyway, so events are kept in a
    list per millisecond (no event is sent before its due time: it goes into the list of the
    millisecond it falls in, sent once that millisecond has passed)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.buckets: dict[int, list["_Conn"]] = {}
        self.keys: list[int] = []  # heap of the buckets' milliseconds
        self.armed = float("inf")  # the millisecond the pending timer fires at
        self.firing = False
        self.events = 0  # token events sent (GET /stats)
        self.board: Any = None  # several server processes: their shared counters (shards.Board)

    def add(self, when: float, conn: "_Conn") -> None:
        """Send ``conn``'s next event at loop time ``when`` (s) or just after."""
        conn.due = when
        key = -int(-when * 1000.0 // 1)  # ceil: the millisecond at whose end it is due
        bucket = self.buckets.get(key)
        if bucket is None:
            self.buckets[key] = [conn]
            heapq.heappush(self.keys, key)
            if key < self.armed and not self.firing:
                self.armed = key
                self.loop.call_at(key / 1000.0, self._fire, key)
        else:
            bucket.append(conn)

    def _fire(self, armed: int) -> None:
        if armed != self.armed:
            return  # superseded by an earlier timer
        self.firing = True
        keys, buckets = self.keys, self.buckets
        now_ms = self.loop.time() * 1000.0
        while keys and keys[0] <= now_ms:
            for conn in buckets.pop(heapq.heappop(keys)):
                conn.emit()  # may add() the stream's next event (later than now)
        self.firing = False
        self.armed = float("inf")
        if keys:
            self.armed = keys[0]
            self.loop.call_at(self.armed / 1000.0, self._fire, self.armed)


# One token event as a whole HTTP chunk, with the server's send stamp in ``id:`` as a fixed 19
# digits (any int64 fits; the client reads int(id)), so every chunk of a given token is a
# constant template formatted with one ``%`` -- per-event Python work is the server's cost.
_EVENT = (b'id: %%019d\ndata: {"object":"text_completion","choices":[{"index":0,"text":"%b",'
          b'"token_ids":[%b],"finish_reason":%b}]}\n\n')
_USAGE = (b'data: {"object":"text_completion","choices":[],"usage":{"prompt_tokens":1,'
          b'"completion_tokens":%d,"total_tokens":%d}}\n\ndata: [DONE]\n\n')
_STAMP_DIGITS = 19


def _chunk(k: int, first_id: int, last: bytes | None) -> bytes:
    """The chunk template (one ``%019d`` left) for an event of ``k`` tokens; ``last``: usage + end."""
    ids = b",".join(b"%d" % (100 + (first_id + i) % 1000) for i in range(k))
    payload = _EVENT % (b"x" * k, ids, b"null" if last is None else b'"length"')
    size = len(payload) - len(b"%019d") + _STAMP_DIGITS + (len(last) if last is not None else 0)
    tail = b"\r\n" if last is None else last + b"\r\n0\r\n\r\n"
    return b"%x\r\n" % size + payload + tail


_ONE_TOKEN = [_chunk(1, i, None) for i in range(1000)]  # the usual event: template per token id
# TGI's /generate_stream, one token per event; the stamp also in the text (AsyncClient drops ids)
_TGI = (b'id: %%019d\ndata:{"index":%d,"token":{"id":%d,"text":"%%019d","logprob":null,"special":false},'
        b'"generated_text":%b,"details":%b}\n\n')


def _tgi_chunk(i: int, n: int) -> bytes:
    last = i == n - 1
    payload = _TGI % (i + 1, 100 + i % 1000, b'"x"' if last else b"null",
                      b'{"finish_reason":"length","generated_tokens":%d,"seed":null}' % n if last else b"null")
    return b"%x\r\n" % (len(payload) - 2 * (5 - _STAMP_DIGITS)) + payload + (b"\r\n0\r\n\r\n" if last else b"\r\n")


class _Conn(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection: parses requests, streams chunked SSE responses."""

    def __init__(self, timing: CalibrationTiming, ticker: _Ticker) -> None:
        self.timing = timing
        self.ticker = ticker
        self.itl_s = timing.itl_ms / 1e3
        self.per_event = timing.tokens_per_event
        self.due = 0.0
        self.buf = b""
        self.tr: asyncio.Transport | None = None
        self.busy = False
        self.n = self.sent = 0  # the streaming response: tokens asked for, tokens sent
        self.loop = asyncio.get_running_loop()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.tr = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.tr = None

    def data_received(self, data: bytes) -> None:
        self.buf += data
        self._next()

    def _next(self) -> None:
        while not self.busy and self.tr is not None:
            head_end = self.buf.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = self.buf[:head_end].decode("latin-1").split("\r\n")
            method, path, _ = (head[0].split(" ") + ["", ""])[:3]
            length = 0
            for h in head[1:]:
                k, _, v = h.partition(":")
                if k.strip().lower() == "content-length":
                    length = int(v.strip())
            if len(self.buf) < head_end + 4 + length:
                return
            body = self.buf[head_end + 4: head_end + 4 + length]
            self.buf = self.buf[head_end + 4 + length:]
            self._handle(method, path.split("?")[0], body)

    def _simple(self, status: str, body: bytes, ctype: str = "application/json") -> None:
        assert self.tr is not None
        self.tr.write(f"HTTP/1.1 {status}\r\ncontent-type: {ctype}\r\ncontent-length: {len(body)}\r\n\r\n".encode()
                      + body)

    def _handle(self, method: str, path: str, body: bytes) -> None:
        if method == "GET" and path == "/health":
            return self._simple("200 OK", b"")
        if method == "GET" and path in ("/v1/models", "/info"):  # /info: TGI's probe reads any JSON object
            return self._simple("200 OK", b'{"object":"list","data":[{"id":"calibration","object":"model"}]}')
        if method == "GET" and path == "/stats":  # the server's own cost: is it the bottleneck?
            board = self.ticker.board  # (several processes: all of them)
            stats = board.total() if board is not None else cpu_times() | {"events": self.ticker.events}
            return self._simple("200 OK", json.dumps(stats).encode())
        if method == "GET" and path == "/metrics":  # what a scraping client costs (benchmarks/bench_product_path.py)
            return self._simple("200 OK", metrics_page(), "text/plain; version=0.0.4")
        if method != "POST" or path not in ("/v1/completions", "/generate_stream"):
            return self._simple("404 Not Found", b'{"error":"not found"}')
        self.tgi = path == "/generate_stream"  # the response speaks TGI's protocol
        try:
            b = json.loads(body)
            n = int(b["parameters"]["max_new_tokens"] if self.tgi else b["max_tokens"])
        except (ValueError, KeyError, TypeError):
            return self._simple("400 Bad Request", b'{"error":"body needs max_tokens / parameters.max_new_tokens"}')
        assert self.tr is not None
        self.busy = True
        self.n, self.sent = n, 0
        self.tr.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        self.ticker.add(self.loop.time() + self.timing.ttft_ms / 1e3, self)

    def emit(self) -> None:
        """Send the stream's next event (due at ``self.due``) and schedule the one after."""
        tr = self.tr
        if tr is None:
            return  # the client went away
        sent, n = self.sent, self.n
        if self.tgi:  # one token per event, the stamp twice (id and token text)
            self.sent, self.ticker.events, t = sent + 1, self.ticker.events + 1, _perf()
            tr.write(_tgi_chunk(sent, n) % (t, t))
            if sent + 1 < n:
                return self.ticker.add(self.due + self.itl_s, self)
            self.busy = False
            return self._next()
        k = self.per_event if n - sent > self.per_event else n - sent
        self.sent = sent + k
        self.ticker.events += 1
        if sent + k < n:
            tmpl = _ONE_TOKEN[sent % 1000] if k == 1 else _chunk(k, sent, None)
            # the stamp is taken as late as possible: right before the write syscall
            tr.write(tmpl % _perf())
            self.ticker.add(self.due + self.itl_s, self)
            return
        # the last token, usage, [DONE] and the end of the chunked body: one write
        tmpl = _chunk(k, sent, _USAGE % (n, n + 1))
        tr.write(tmpl % _perf())
        self.busy = False
        self._next()


async def serve(host: str, port: int, timing: CalibrationTiming, ready: Any = None, sock: Any = None,
                board: Any = None, shard: int = 0) -> None:
    """Serve until stopped; ``sock``/``board``/``shard``: one of several processes (shards.py)."""
    loop = asyncio.get_running_loop()
    ticker = _Ticker(loop)
    ticker.board = board
    if board is not None:
        def publish() -> None:
            board.publish(shard, ticker.events)
            loop.call_later(shards.PUBLISH_S, publish)
        publish()
    kw = {"sock": sock} if sock is not None else {"host": host, "port": port, "reuse_address": True}
    server = await loop.create_server(lambda: _Conn(timing, ticker), backlog=8192, **kw)
    if ready is not None:
        ready(server.sockets[0].getsockname()[1])
    async with server:
        await server.serve_forever()


def raise_nofile() -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m compare.running.calibration",
                                description="loopback streaming server with known TTFT/ITL")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    for flag, default in (("--ttft-ms", 20.0), ("--itl-ms", 40.0), ("--tokens-per-event", 1)):
        p.add_argument(flag, type=type(default), default=default)
    p.add_argument("--cpus", default="", help="pin to these CPUs, e.g. 1 or 1,2")
    p.add_argument("--procs", type=int, default=1, help="server processes sharing the port (SO_REUSEPORT), "
                   "the --cpus dealt out among them")
    a = p.parse_args(argv)
    raise_nofile()
    cpus = [int(c) for c in a.cpus.split(",")] if a.cpus else []
    from compare.running import aio

    timing = CalibrationTiming(a.ttft_ms, a.itl_ms, a.tokens_per_event)
    ready = lambda port: print(f"READY {port}", flush=True)  # noqa: E731
    # uvloop when installed: the reference must not be the bottleneck (it is not what is measured)
    if a.procs > 1:
        return shards.run(a.host, a.port, a.procs, cpus, lambda sock, i, board: aio.run(
            serve(a.host, 0, timing, sock=sock, board=board, shard=i)), ready)
    if cpus:
        os.sched_setaffinity(0, set(cpus))
    aio.run(serve(a.host, a.port, timing, ready=ready))


@dataclass
class CalibrationServerProcess:
    """``with CalibrationServerProcess(timing) as url:`` - the server in a subprocess, always stopped."""

    timing: CalibrationTiming = field(default_factory=CalibrationTiming)
    cpus: str = ""
    proc: subprocess.Popen | None = None
    procs: int = 1  # processes sharing the port (shards.py)

    def command(self) -> list[str]:  # a benchmark's own variant of the server overrides it
        t, cpus = self.timing, (["--cpus", self.cpus] if self.cpus else [])
        return [sys.executable, "-m", "compare.running.calibration", "--ttft-ms", str(t.ttft_ms), "--itl-ms",
                str(t.itl_ms), "--tokens-per-event", str(t.tokens_per_event), "--procs", str(self.procs), *cpus]

    def __enter__(self) -> str:
        self.proc = subprocess.Popen(self.command(), stdout=subprocess.PIPE, text=True, start_new_session=True)
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line.startswith("READY "):
            self.__exit__()
            raise RuntimeError(f"calibration server did not start (exit {self.proc.poll()})")
        return f"http://127.0.0.1:{int(line.split()[1])}"

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)  # its own session: the shards too
                self.proc.wait()
            self.proc = None


_PAGE: list[bytes] = []


def metrics_page() -> bytes:
    """A Prometheus page of a vLLM server's size and shape (the families a scrape keeps: gauges,
    counters, 16 histograms of 30 buckets, two label sets; ~80 KB): its numbers are not the
    server's (all zero), only its cost to fetch and parse is real."""
    if not _PAGE:
        lines = []
        for g in ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc"):
            lines += [f"# TYPE vllm:{g} gauge"] + [f'vllm:{g}{{engine="{e}",model_name="calibration"}} 0.0'
                                                     for e in (0, 1)]
        for c in ("prompt_tokens", "generation_tokens", "prefix_cache_queries", "prefix_cache_hits"):
            lines += [f"# TYPE vllm:{c}_total counter"] + [f'vllm:{c}_total{{engine="{e}",model_name="calibration"}} 0.0'
                                                            for e in (0, 1)]
        for h in range(16):
            name = f"vllm:histogram_{h}_seconds"
            lines.append(f"# TYPE {name} histogram")
            for e in (0, 1):
                lab = f'engine="{e}",model_name="calibration"'
                lines += [f'{name}_bucket{{{lab},le="{0.001 * 1.5 ** k:.6g}"}} 0.0' for k in range(29)]
                lines += [f'{name}_bucket{{{lab},le="+Inf"}} 0.0', f"{name}_sum{{{lab}}} 0.0",
                          f"{name}_count{{{lab}}} 0.0"]
        _PAGE.append(("\n".join(lines) + "\n").encode())
    return _PAGE[0]


def cpu_times() -> dict[str, float]:
    """This process's CPU seconds so far: user (Python + libraries) and sys (socket syscalls)."""
    import resource
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {"user_s": ru.ru_utime, "sys_s": ru.ru_stime}

