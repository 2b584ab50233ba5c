"""Backends whose engine runs in a process of its own, and the frames both sides speak.

Some engines cannot share the measuring process: OpenVINO GenAI's ``step()`` holds the GIL for a
whole step and transformers' continuous batching runs a Python generation thread, so either would
stall the client's event loop. Such an engine runs in ``python -m <engine module>``; commands go to
its stdin and events come back on its stdout as length-prefixed msgpack frames. The engine process
stamps tokens with ``perf_counter_ns()`` when the engine hands them over; on Linux that clock
(CLOCK_MONOTONIC) is ours too, so engine-side and delivery stamps compare directly.

Frames in: ("config", dict) first; ("add", rid, prompt, params) with prompt {"ids": [...]} |
{"text": s} | {"messages": [[role, content], ...]}; ("cancel", rid); ("stop",).
Frames out: ("ready", info) | ("fatal", message); ("added", rid, n_prompt); ("error", rid, kind,
message); ("tokens", [[rid, ids, t_first_ns, t_last_ns], ...]); ("end", rid, finish_reason[, stats]);
("cancelled", rid) when a cancel reached a request still in the engine.

The engine process dies with ours (PR_SET_PDEATHSIG) and ignores the terminal's SIGINT (we decide
when it stops); when it dies first, every request in it fails as ``engine_dead`` and so do later ones.
"""
from __future__ import annotations

import asyncio
import os
import signal
import struct
import sys
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator

from core.errors import BackendRequestError, BackendStartError, FailureKind
from backends.base import BackendBase
from core.records import GenerationRequest, RequestContext, StreamEnd, StreamItem, TokenEvent
from core.engine_guard import check_start

_LEN = struct.Struct("<I")


def encode(msg: Any) -> bytes:
    import msgspec

    body = msgspec.msgpack.encode(msg)
    return _LEN.pack(len(body)) + body


def decode(body: bytes) -> Any:
    import msgspec

    return msgspec.msgpack.decode(body)


def _read_exact(fd: int, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def read_frame(fd: int) -> Any | None:
    """One frame from an unbuffered fd (so select() sees every frame not yet read); None at EOF."""
    head = _read_exact(fd, _LEN.size)
    body = _read_exact(fd, _LEN.unpack(head)[0]) if head else None
    return None if body is None else decode(body)


def engine_process_setup() -> tuple[int, Any]:
    """In the engine process: die with the parent, leave SIGINT to it, keep stdout for frames.
    Returns (command fd, frame writer)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass
    if os.getppid() == 1:  # the parent died before prctl took effect
        os._exit(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    out = sys.stdout.buffer
    sys.stdout = sys.stderr  # anything the libraries print goes to the log, never into the frames
    return sys.stdin.fileno(), out


def fatal_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else 'no detail'}"


@dataclass
class _Req:
    out: asyncio.Queue
    t_added_ns: int = 0
    t_first_ns: int = 0
    t_last_ns: int = 0
    n_tokens: int = 0
    n_prompt: int | None = None
    finish: str | None = None


class EngineProcessBackend(BackendBase):
    """The parent side: starts the engine process, routes its frames to the requests' streams."""

    engine_module = ""  # e.g. "backends.openvino.engine"
    engine_label = ""  # e.g. "the OpenVINO engine", in messages
    start_timeout_s = 600.0  # loading a 7B checkpoint on CPU takes minutes
    stop_timeout_s = 10.0

    def __init__(self, spec: Any, name: str) -> None:
        self.spec = spec
        self.name = name
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task | None = None
        self._reqs: dict[int, _Req] = {}
        self._dead: str | None = None
        self._fatal: str | None = None
        self._n = 0
        self._info: dict[str, Any] = {}
        self._stats: dict[str, Any] = {}
        self.cancelled_in_engine = 0  # cancels that reached a request still in the engine

    async def _start(self, config: dict[str, Any], env: dict[str, str] | None = None) -> None:
        check_start(self.engine_label or self.engine_module)
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", self.engine_module, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, env={**os.environ, **(env or {})})
        self._send(("config", config))
        try:
            first = await asyncio.wait_for(self._frame(self._proc.stdout), self.start_timeout_s)
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError):
            first = None
        if not first or first[0] != "ready":
            code = await self._stop()
            why = first[1] if first and first[0] == "fatal" else f"the engine process exited (code {code})"
            raise BackendStartError(f"{self.engine_label} failed to start: {why}")
        self._info = first[1]
        self._reader = asyncio.create_task(self._read_events(self._proc))

    def _send(self, msg: Any) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        self._proc.stdin.write(encode(msg))

    @staticmethod
    async def _frame(stdout: asyncio.StreamReader) -> Any:
        head = await stdout.readexactly(_LEN.size)
        return decode(await stdout.readexactly(_LEN.unpack(head)[0]))

    async def _read_events(self, proc: asyncio.subprocess.Process) -> None:
        try:
            while True:
                msg = await self._frame(proc.stdout)
                kind = msg[0]
                if kind == "tokens":
                    for rid, ids, t_first, t_last in msg[1]:
                        if (r := self._reqs.get(rid)) is not None:
                            r.t_first_ns = r.t_first_ns or t_first
                            r.t_last_ns = t_last
                            r.n_tokens += len(ids)
                            r.out.put_nowait(tuple(ids))
                elif kind == "end":
                    if len(msg) > 3:
                        self._stats = msg[3]
                    if (r := self._reqs.pop(msg[1], None)) is not None:
                        r.finish = msg[2]
                        r.out.put_nowait(None)
                elif kind == "added":
                    if (r := self._reqs.get(msg[1])) is not None:
                        r.n_prompt = msg[2]
                elif kind == "error":
                    if (r := self._reqs.pop(msg[1], None)) is not None:
                        r.out.put_nowait(BackendRequestError(msg[2], msg[3]))
                elif kind == "cancelled":
                    self.cancelled_in_engine += 1
                elif kind == "fatal":
                    self._fatal = msg[1]
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        code = await proc.wait()
        self._dead = f"{self.engine_label} process exited (code {code})" + (f": {self._fatal}" if self._fatal else "")
        for r in self._reqs.values():
            r.out.put_nowait(BackendRequestError(FailureKind.ENGINE_DEAD, self._dead))
        self._reqs.clear()

    async def _stop(self) -> int | None:
        p, self._proc = self._proc, None
        if p is None:
            return None
        if p.returncode is None:
            try:
                p.stdin.write(encode(("stop",)))
                p.stdin.close()
            except (ConnectionError, RuntimeError):
                pass
            try:
                await asyncio.wait_for(p.wait(), self.stop_timeout_s)
            except asyncio.TimeoutError:
                p.kill()
                await p.wait()
        return p.returncode

    async def __aexit__(self, *exc: object) -> None:
        await self._stop()
        if self._reader is not None:  # ends at the process's EOF
            try:
                await asyncio.wait_for(self._reader, 10)
            except asyncio.TimeoutError:
                pass
            self._reader = None

    def _params(self, req: GenerationRequest) -> dict[str, Any]:
        """The generation parameters the engine process takes for ``req``."""
        raise NotImplementedError

    async def stream(self, req: GenerationRequest, ctx: RequestContext | None = None) -> AsyncIterator[StreamItem]:
        if self._proc is None or self._dead:
            raise BackendRequestError(FailureKind.ENGINE_DEAD, self._dead or "engine is not running")
        if req.prompt_token_ids is not None:
            prompt: dict[str, Any] = {"ids": list(req.prompt_token_ids)}
        elif req.messages is not None:
            prompt = {"messages": [list(m) for m in req.messages]}
        else:
            prompt = {"text": req.prompt_text}
        self._n += 1
        rid = self._n
        r = self._reqs[rid] = _Req(asyncio.Queue(), t_added_ns=time.perf_counter_ns())
        self._send(("add", rid, prompt, self._params(req)))
        done = False
        first = last = 0
        try:
            while True:
                item = await r.out.get()
                if isinstance(item, BaseException):
                    done = True
                    raise item
                if item is None:
                    done = True
                    break
                last = time.perf_counter_ns()
                first = first or last
                yield TokenEvent(t_ns=last, token_ids=item)
        finally:
            if not done and self._proc is not None and not self._dead:  # the consumer went away
                self._reqs.pop(rid, None)
                self._send(("cancel", rid))  # frees the engine's slot and KV blocks
        yield StreamEnd(t_ns=time.perf_counter_ns(), finish_reason=r.finish, prompt_tokens=r.n_prompt,
                        completion_tokens=r.n_tokens, engine_metrics=_engine_metrics(r, first, last))


def _engine_metrics(r: _Req, first_ns: int, last_ns: int) -> dict[str, float]:
    """Engine-side stamps (when the engine handed each token over), the vLLM backend's keys."""
    if not r.t_first_ns:
        return {}
    out = {"first_token_latency_s": (r.t_first_ns - r.t_added_ns) / 1e9,
           "engine_first_token_ts": r.t_first_ns / 1e9, "engine_last_token_ts": r.t_last_ns / 1e9,
           "decode_s": (r.t_last_ns - r.t_first_ns) / 1e9, "num_generation_tokens": float(r.n_tokens)}
    if first_ns:  # perf_counter is CLOCK_MONOTONIC on both sides: the event loop's delivery delay
        out["first_token_delivery_s"] = (first_ns - r.t_first_ns) / 1e9
        out["last_token_delivery_s"] = (last_ns - r.t_last_ns) / 1e9
    return out
