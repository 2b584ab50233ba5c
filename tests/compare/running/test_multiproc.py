"""Levels sent by several client processes (compare/running/multiproc.py), against the real
loopback streaming server (compare/running/calibration/server.py) over real HTTP: what two processes
ingest, the merged order and clock, a client process killed mid-level, Ctrl-C, refusals."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from backends.http_backends import HttpStreamBackend
from compare.running.calibration import CalibrationServerProcess, CalibrationTiming
from compare.running.executor import run_level
from compare.running.multiproc import auto_procs, level_procs, not_shardable, run_level_procs
from compare.workload.schedule import LoadLevel, poisson_offsets_ns
from core.records import GenerationRequest
from tests.conftest import ROOT, VENV_BIN

WORKER = "compare.running.multiproc_worker"


def _workers_of(pid: int) -> list[int]:
    """Client processes (by their command line) whose parent is ``pid``."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmd = (d / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid and WORKER.encode() in cmd:
            out.append(int(d.name))
    return out


def _events_sent(url: str) -> int:
    import httpx

    return int(httpx.get(url + "/stats", timeout=10).json()["events"])


def _reqs(n: int, tokens: int) -> list[GenerationRequest]:
    return [GenerationRequest(request_id=f"r{i:02d}", max_tokens=tokens, prompt_token_ids=(1, 2, 3))
            for i in range(n)]


@pytest.fixture(scope="module")
def server():
    with CalibrationServerProcess(CalibrationTiming(ttft_ms=20, itl_ms=10)) as url:
        yield url


def test_two_processes_ingest_what_one_does(server):
    reqs = _reqs(12, 16)
    seen: list = []

    async def go():
        async with HttpStreamBackend(None, "openai", base_url=server, metrics=None) as b:
            one = await run_level(b, reqs, LoadLevel("concurrency", 4), seed=3, timeout_s=60, max_errors=6)
            two = await run_level_procs(b, reqs, LoadLevel("concurrency", 4), procs=2, seed=3, timeout_s=60,
                                        max_errors=6, on_record=seen.append)
            rate = await run_level_procs(b, reqs, LoadLevel("rate", 40), procs=2, seed=3, timeout_s=60,
                                         max_errors=6)
            return one, two, rate

    one, two, rate = asyncio.run(go())
    assert two.aborted is None and len(two.records) == len(one.records) == 12
    assert seen == two.records  # on_record saw them in the merged order
    assert {r.request_id for r in two.records} == {r.request_id for r in one.records}
    for r in two.records:
        assert r.ok and len(r.token_ids) == 16 and sum(r.event_token_counts) == 16, r
        assert two.t_start_ns <= r.t_sent_ns < r.event_times_ns[0] <= r.t_end_ns <= two.t_end_ns  # one clock
    # each process's records come in its completion order and keep it in the merged list; across
    # processes the merge is the order they reach the parent (under load a few ms after their ends,
    # so not re-sorted by end: a record is written as it arrives)
    order = [r.request_id for r in two.records]
    for _, recs in two.lag_samples_by_proc:
        ends = [r.t_end_ns for r in recs]
        assert ends == sorted(ends)
        mine = {r.request_id for r in recs}
        assert [rid for rid in order if rid in mine] == [r.request_id for r in recs]
    procs = two.client_procs["processes"]
    assert two.client_procs["n"] == 2 and len({p["pid"] for p in procs}) == 2
    assert sorted(p["requests"] for p in procs) == [6, 6]  # 2 streams each, equal requests: an even split
    assert all(p["cpu_s"] > 0 and p["loop_lag_ms"]["samples"] > 0 for p in procs)
    assert two.loop_lag_ms["max"] == max(p["loop_lag_ms"]["max"] for p in procs)
    # each process's loop-lag wake-ups come back with the records it sent, for the client's health
    assert len(two.lag_samples_by_proc) == 2 and all("lag_samples" not in p for p in procs)
    assert sorted(len(recs) for _, recs in two.lag_samples_by_proc) == [6, 6]
    for (samples, recs), p in zip(two.lag_samples_by_proc, procs):
        assert len(samples.t_ns) == len(samples.lag_ms) == p["loop_lag_ms"]["samples"]
        assert round(max(samples.lag_ms), 3) == p["loop_lag_ms"]["max"]
    # the wall time is the level's, not the processes' start-up: within 50% of one process's
    assert (two.t_end_ns - two.t_start_ns) < 1.5 * (one.t_end_ns - one.t_start_ns)
    # open loop: the one seeded schedule, every arrival sent at (never before) its time
    assert rate.schedule_offsets_ns == poisson_offsets_ns(12, 40, 3)
    assert sorted(r.t_scheduled_ns - rate.t_start_ns for r in rate.records) == sorted(rate.schedule_offsets_ns)
    assert all(r.ok and r.t_sent_ns >= r.t_scheduled_ns for r in rate.records)
    assert not _workers_of(os.getpid())


def test_a_killed_client_process_fails_the_level_and_leaves_none_behind():
    reqs = _reqs(8, 60)  # 60 tokens at 50 ms: each request streams for 3 s
    killed: list[int] = []

    async def go(url):
        async with HttpStreamBackend(None, "openai", base_url=url, metrics=None) as b:
            started: list[list[int]] = []
            task = asyncio.create_task(run_level_procs(b, reqs, LoadLevel("concurrency", 4), procs=2, seed=1,
                                                       timeout_s=60, max_errors=8, on_start=started.append))
            while not started:
                await asyncio.sleep(0.05)
            assert sorted(started[0]) == sorted(_workers_of(os.getpid()))
            # requests in flight: the server has streamed tokens (not a fixed wait: on a loaded
            # machine the client processes may still be starting after seconds)
            while await asyncio.to_thread(_events_sent, url) == 0:
                await asyncio.sleep(0.05)
            os.kill(started[0][1], signal.SIGKILL)
            killed.append(started[0][1])
            return await task

    with CalibrationServerProcess(CalibrationTiming(ttft_ms=20, itl_ms=50)) as url:
        t = time.monotonic()
        out = asyncio.run(go(url))
    assert f"(pid {killed[0]}) died (killed by SIGKILL)" in out.aborted and "client process" in out.aborted
    assert "\n" not in out.aborted
    assert time.monotonic() - t < 30  # the survivor's requests were cancelled, not waited for
    assert out.records and all(r.error_kind == "cancelled" for r in out.records)  # the survivor's, kept
    assert not _workers_of(os.getpid())
    assert not Path(f"/proc/{killed[0]}").exists()


def test_auto_and_refusals(tmp_path):
    local = HttpStreamBackend(None, "openai", base_url="http://127.0.0.1:1", metrics=None)
    remote = HttpStreamBackend(None, "openai", base_url="http://10.1.2.3:8000", metrics=None)
    assert not_shardable(local) is None

    class Launching(HttpStreamBackend):  # a server started here (vllm-server, containers) is local wherever it listens
        async def _start_server(self) -> None:
            pass
    launched = Launching(None, "x", base_url="http://10.1.2.3:8000", metrics=None)
    assert local.engine_is_local and launched.engine_is_local and not remote.engine_is_local
    assert auto_procs(local, cores=2) == 1 and auto_procs(local, cores=16) == 6
    assert auto_procs(remote, cores=16) == 8
    c64, c8 = LoadLevel("concurrency", 64), LoadLevel("concurrency", 8)
    assert level_procs(2, local, c8, 100) == 2 and level_procs(4, local, LoadLevel("concurrency", 3), 100) == 3
    assert level_procs(None, remote, c8, 100) == 1  # auto: a small level stays in one process
    assert level_procs(None, remote, c64, 100) == min(4, auto_procs(remote))
    # an in-process backend: refused with one line before anything starts, nothing written
    p = subprocess.run([str(VENV_BIN / "compare"), "run", "--backends", "hf", "--client-procs", "2",
                        "--num-requests", "2", "--out", str(tmp_path)], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 2, p.stderr
    errors = [x for x in p.stderr.splitlines() if x.startswith("error:")]
    assert len(errors) == 1 and "--client-procs 2: hf " in errors[0] and "Traceback" not in p.stderr, p.stderr
    assert not list(tmp_path.iterdir())
    p = subprocess.run([str(VENV_BIN / "compare"), "run", "--client-procs", "0"], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 2 and "--client-procs" in p.stderr and "Traceback" not in p.stderr


def test_ctrl_c_stops_every_client_process(tmp_path):
    with CalibrationServerProcess(CalibrationTiming(ttft_ms=20, itl_ms=50)) as url:
        proc = subprocess.Popen([str(VENV_BIN / "compare"), "run", "--backends", f"openai@{url}",
                                 "--client-procs", "2", "--num-requests", "8", "--input-len", "8",
                                 "--output-len", "100", "--concurrency", "4", "--warmup", "0",
                                 "--out", str(tmp_path), "--run-id", "x"], cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 120
            while len(_workers_of(proc.pid)) < 2 and time.monotonic() < deadline:
                time.sleep(0.1)
            workers = _workers_of(proc.pid)
            assert len(workers) == 2, proc.stderr.read() if proc.poll() is not None else "no client processes"
            while _events_sent(url) == 0 and time.monotonic() < deadline:  # the level is under way
                time.sleep(0.1)
            time.sleep(0.5)  # requests in flight (each streams for 5 s)
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 130, err[-2000:]
    run = json.loads((tmp_path / "x" / "run.json").read_text())
    assert run["status"] == "interrupted"
    (level,) = run["backends"][f"openai@{url}"]["levels"].values()
    assert level["aborted"].startswith("interrupted") and level["client_procs"]["n"] == 2
    recs = [json.loads(x) for x in (tmp_path / "x" / "requests.jsonl").read_text().splitlines()]
    assert len(recs) == 4 and {r["error_kind"] for r in recs} == {"cancelled"}  # the 4 in flight, kept
    assert not any(Path(f"/proc/{w}").exists() for w in workers)
