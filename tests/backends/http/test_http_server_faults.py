"""Server-level faults of HTTP backends, against real loopback servers: a server that dies
mid-level, one that hangs (start-up probe, warm-up), credentials in the URL."""
from __future__ import annotations

import asyncio
import base64
import json
import time
from pathlib import Path

import pytest

from backends.http.urls import redact_url, split_userinfo
from backends.http_backends import HttpStreamBackend
from compare.running.executor import run_level
from compare.workload.schedule import LoadLevel
from core.errors import BackendStartError
from core.records import GenerationRequest
from tests.conftest import run_cli
from tests.http_util import RawHttpServer, ThreadedServer, hang, openai_routes, openai_stream, sse_response

TOKEN = b'data: {"choices":[{"index":0,"text":"a","token_ids":[5],"finish_reason":null}]}\n\n'
DONE = b'data: {"choices":[{"index":0,"text":"b","token_ids":[6],"finish_reason":"length"}]}\n\ndata: [DONE]\n\n'


def test_the_first_refused_connection_after_the_server_died_stops_the_level():
    """The server stops listening after 10 requests: the next request is refused and that one
    record (engine_dead) stops the level; no pile of connection errors up to --max-errors."""
    async def go():
        served = {"n": 0}
        stream = sse_response([TOKEN, DONE])

        async def handler(reader, writer):
            served["n"] += 1
            if served["n"] == 10:
                s.server.close()  # the server dies: nothing listens on the port any more
            await stream(reader, writer)

        async with RawHttpServer(handler) as s:
            b = HttpStreamBackend(None, "t", protocol="openai", base_url=s.url, model="m", metrics=None)

            async def no_probe():
                return None
            b._probe = no_probe
            async with b:
                reqs = [GenerationRequest(f"r{i}", 2, prompt_token_ids=(1,)) for i in range(200)]
                return await run_level(b, reqs, LoadLevel("rate", 400), seed=0, timeout_s=10, max_errors=200)

    out = asyncio.run(go())
    dead = [r for r in out.records if r.error_kind == "engine_dead"]
    assert out.aborted and "engine died" in out.aborted and "refused" in out.aborted
    assert 1 <= len(dead) <= 3, [r.error_kind for r in out.records]
    assert sum(r.ok for r in out.records) >= 9 and len(out.records) < 40  # the rest were never sent


def test_the_start_up_probe_waits_for_the_run_timeout_and_names_a_hung_server():
    async def go(timeout_s):
        async with RawHttpServer(hang()) as s:
            b = HttpStreamBackend(None, "openai@x", protocol="openai", base_url=s.url)
            b.set_request_timeout(timeout_s)
            t0 = time.monotonic()
            with pytest.raises(BackendStartError) as e:
                async with b:
                    pass
            return str(e.value), time.monotonic() - t0

    msg, took = asyncio.run(go(0.5))
    assert "did not answer within 0.5 s (--timeout)" in msg and "cannot reach" not in msg
    assert not msg.startswith("openai@x") and 0.4 < took < 5


def test_a_hung_server_fails_fast_at_warm_up_and_says_so(tmp_path):
    """Health answers, completions hang: the first warm-up request times out and the backend
    fails with that reason, instead of every warm-up and measured request waiting --timeout."""
    with ThreadedServer(hang(), openai_routes()) as s:
        t0 = time.monotonic()
        r = run_cli("run", "--backends", f"openai@{s.url}", "--num-requests", "4", "--input-len", "8",
                    "--output-len", "4", "--concurrency", "2", "--warmup", "2", "--timeout", "1",
                    "--out", str(tmp_path), "--run-id", "h", timeout=300, env={"COLUMNS": "400"})
        took = time.monotonic() - t0
    out = r.stdout + r.stderr
    assert "warm-up request failed (timeout: no completion within 1 s)" in out, out[-2000:]
    assert f"[openai@{s.url}] openai@" not in out  # the backend's name is said once per line
    run = json.loads((tmp_path / "h" / "run.json").read_text())
    (entry,) = run["backends"].values()
    assert entry["status"] == "failed" and "warm-up request failed" in entry["error"]
    assert took < 60 and "Traceback" not in out


def test_url_credentials_are_sent_as_basic_auth_and_never_shown_or_stored(tmp_path):
    assert redact_url("openai@http://user:secret@h:1/v1") == "openai@http://user:***@h:1/v1"
    assert redact_url("tgi@https://tok@h") == "tgi@https://***@h"
    assert split_userinfo("http://u:p%40ss@127.0.0.1:9/x/") == ("http://127.0.0.1:9/x",
                                                              "Basic " + base64.b64encode(b"u:p@ss").decode())
    with ThreadedServer(openai_stream(4), openai_routes()) as s:
        url = s.url.replace("http://", "http://user:s3cr3t-w0rd@")
        r = run_cli("run", "--backends", f"openai@{url}", "--num-requests", "3", "--input-len", "8",
                    "--output-len", "4", "--concurrency", "1", "--warmup", "1", "--out", str(tmp_path),
                    "--run-id", "c", timeout=300)
        heads = list(s.raw.heads)
    assert r.returncode == 0, r.stderr[-2000:]
    auth = "authorization: basic " + base64.b64encode(b"user:s3cr3t-w0rd").decode().lower()
    assert heads and all(auth in h.decode().lower() for h in heads)
    assert "s3cr3t" not in r.stdout + r.stderr
    files = [p for p in Path(tmp_path).rglob("*") if p.is_file()]
    assert files and not [p for p in files if b"s3cr3t" in p.read_bytes()]
    run = json.loads((tmp_path / "c" / "run.json").read_text())
    assert list(run["backends"]) == [f"openai@{s.url.replace('http://', 'http://user:***@')}"]
