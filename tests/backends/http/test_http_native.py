"""The optional C read path (backends/http/_native.c) gives exactly the events and stamps of the
pure-Python path it replaces, on the forms it takes, and declines (emitting nothing) the rest."""
from __future__ import annotations

import asyncio

import pytest

from backends.http import connection, native
from backends.http.connection import _Conn
from backends.http.sse import SseFramer

pytestmark = pytest.mark.skipif(native.frame_chunks is None, reason=f"native helpers: {native.status}")


def _chunk(payload: bytes, ext: bytes = b"", upper: bool = False) -> bytes:
    size = (b"%X" if upper else b"%x") % len(payload)
    return size + ext + b"\r\n" + payload + b"\r\n"


CAL = b'id: 0001732971234567890\ndata: {"object":"text_completion","choices":[{"index":0,"text":"x","token_ids":[7]}]}\n\n'
VLLM = b'data: {"choices":[{"index":0,"text":"h\xc3\xa9","token_ids":[1,2]}]}\n\n'
TGI = b'data:{"token":{"id":5,"text":"a"}}\n\n'
# (read, whether the C path must take it)
READS = [
    (_chunk(CAL), True),
    (_chunk(VLLM), True),
    (_chunk(TGI), True),
    (_chunk(CAL) + _chunk(VLLM) + _chunk(TGI), True),  # several chunks in one read
    (_chunk(CAL + VLLM), True),  # several events in one chunk
    (_chunk(b"id:7\ndata:x\n\n"), True),  # no spaces
    (_chunk(b"id:\ndata: \n\n"), True),  # empty id and data
    (_chunk(VLLM, upper=True), True),
    (_chunk(VLLM, ext=b";a=b"), False),  # chunk extension
    (_chunk(b"data: x\r\n\r\n"), False),  # CRLF line ends
    (_chunk(b": ping\n\n"), False),  # comment
    (_chunk(b"event: error\ndata: {}\n\n"), False),
    (_chunk(b"data: a\ndata: b\n\n"), False),  # multi-line data
    (_chunk(b"data: a\nid: 3\n\n"), False),
    (_chunk(b"data: a\n\n\n\n"), False),  # blank lines after the event
    (_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n", False),  # the end of the body
    (_chunk(b"data: a\n"), False),  # an event cut at the chunk end
    (_chunk(VLLM)[:-5], False),  # a cut chunk
    (_chunk(b"data: \xff\xfe\n\n"), False),  # not UTF-8: the Python path raises it
    (b"zz\r\n" + VLLM + b"\r\n", False),
]


def _events(read: bytes, use_native: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[list, BaseException | None]:
    monkeypatch.setattr(connection, "_frame_chunks", native.frame_chunks if use_native else None)

    async def main():
        c = _Conn()
        c.in_head, c.mode = False, "chunked"
        out: list = []
        c.framer = SseFramer(out.append)
        c.sink = type("S", (), {"ready": False})()
        try:
            c.received(read, 111, 222)
            c.received(_chunk(TGI), 333, 444)  # the state it leaves behind frames the next read alike
            return out, None
        except Exception as e:  # noqa: BLE001 - the same failure both ways is the contract
            return out, e
    return asyncio.run(main())


@pytest.mark.parametrize("read,taken", READS, ids=[f"read{i}" for i in range(len(READS))])
def test_native_framing_equals_python(read: bytes, taken: bool, monkeypatch: pytest.MonkeyPatch):
    py, py_err = _events(read, False, monkeypatch)
    nat, nat_err = _events(read, True, monkeypatch)
    assert nat == py and [tuple(e) for e in nat] == [tuple(e) for e in py]
    assert type(nat_err) is type(py_err)
    emitted: list = []
    n = native.frame_chunks(read, 1, 2, emitted.append, type(py[0]) if py else tuple)
    assert (n >= 0) == taken, n
    if not taken:
        assert emitted == []  # declined reads emit nothing
    else:
        assert n == len(emitted) and all(e.t_ns == 1 and e.rx_ns == 2 for e in emitted)


def test_stale_or_disabled_build_is_not_used(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(native.ENV, "0")
    native._load()
    try:
        assert native.status.startswith("off") and native.frame_chunks is None and native.recv_stamped is None
    finally:
        monkeypatch.delenv(native.ENV)
        native._load()
    assert native.status == "on" and native.recv_stamped is not None
