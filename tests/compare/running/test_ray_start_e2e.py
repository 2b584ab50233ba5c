"""``compare run --ray 127.0.0.1:PORT`` against a head started with ``ray start``, and ``ray stop``
leaving nothing behind."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.compare.running.test_ray_e2e import LOOPBACK, SMALL_STORE, VENV_BIN, WORKLOAD, _kill_left
from tests.conftest import TINY_SPEC_ARGS, run_cli

pytestmark = pytest.mark.engine  # `ray start --head` and engine cells

ray = pytest.importorskip("ray")


def _cells_running() -> list[int]:
    import psutil

    return [p.pid for p in psutil.process_iter(["cmdline"]) if "ray::run_cell" in " ".join(p.info["cmdline"] or ())]


def _engine_started(since: float) -> bool:
    """A cell's scratch run.json (its engine up: ``describe`` written), newer than ``since``."""
    for p in Path(tempfile.gettempdir()).glob("llmc-cell-*/cell/run.json"):
        try:
            if p.stat().st_mtime >= since and '"describe"' in p.read_text():
                return True
        except OSError:
            continue
    return False


def _ctrl_c_mid_cell(tiny_model, tmp_path, port: int) -> None:
    """Ctrl-C while a cell runs on the cluster: the cell is interrupted in its worker (its engine
    torn down there), what it measured comes back, the run ends interrupted with exit 130. The
    signal's way into the cell is orchestration: the cell runs the fake engine (backends/fake/, a
    test instrument; 400 requests of 64 tokens at 5 ms a token, two at a time: ~65 s); a real
    engine's start and stop in a cell is the run above."""
    started = time.time()
    proc = subprocess.Popen([str(VENV_BIN / "compare"), "run", "--backends", "fake", "--native", "fake.itl=5ms",
                             "--model", str(tiny_model), "--num-requests", "400", "--input-len", "8", "--output-len", "64",
                             "--prompt-format", "token_ids", "--concurrency", "2", "--warmup", "1",
                             "--ray", f"127.0.0.1:{port}", "--out", str(tmp_path), "--run-id", "stopped"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not _engine_started(started) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.5)
        assert _cells_running(), "no cell started"
        time.sleep(5)  # past the one short warm-up request, into the level (400 requests: minutes)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-2000:]
    run = json.loads((tmp_path / "stopped" / "run.json").read_text())
    assert run["status"] == "interrupted"
    entry = run["backends"]["fake"]
    assert entry["status"] == "interrupted" and "stopped by SIGINT" in entry["error"]
    recs = (tmp_path / "stopped" / "requests.jsonl").read_text().splitlines()
    assert len(recs) < 400  # the level was cut short; what finished (and what was cancelled) is kept
    for level in entry["levels"].values():
        assert level["aborted"].startswith("interrupted")
    deadline = time.monotonic() + 30
    while _cells_running() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _cells_running()  # no cell is still measuring


def test_cli_against_ray_start_head(tiny_model, tmp_path):
    """`ray start --head` on the loopback address, `compare run --ray 127.0.0.1:PORT`, `ray stop`."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    temp = tempfile.mkdtemp(prefix="llmc-ray-", dir="/tmp")
    env = {**os.environ, **LOOPBACK}
    ray_bin = str(VENV_BIN / "ray")
    try:
        start = subprocess.run([ray_bin, "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(port),
                                "--num-cpus", "1", "--resources", '{"llmc_slot": 1}', "--object-store-memory",
                                str(SMALL_STORE), "--include-dashboard", "false", "--temp-dir", temp,
                                "--disable-usage-stats"], env=env, capture_output=True, text=True, timeout=180)
        assert start.returncode == 0, start.stderr[-2000:]
        p = run_cli("run", "--backends", "hf", "--model", str(tiny_model), *TINY_SPEC_ARGS, *WORKLOAD,
                    "--ray", f"127.0.0.1:{port}", "--out", str(tmp_path), "--run-id", "cli", timeout=600)
        assert p.returncode == 0, p.stderr[-3000:] + p.stdout[-3000:]
        assert "hf c2: 2/2 ok" in p.stdout
        run = json.loads((tmp_path / "cli" / "run.json").read_text())
        records = (tmp_path / "cli" / "requests.jsonl").read_text().splitlines()
        assert run["status"] == "complete" and len(records) == 2
        assert [c["ip"] for c in run["ray"]["cells"]] == ["127.0.0.1"]
        assert run["ray"]["address"] == f"127.0.0.1:{port}"
        _ctrl_c_mid_cell(tiny_model, tmp_path, port)
    finally:
        stop = subprocess.run([ray_bin, "stop"], env=env, capture_output=True, text=True, timeout=120)
        left = _kill_left(temp)
        shutil.rmtree(temp, ignore_errors=True)
    assert stop.returncode == 0, stop.stderr[-2000:]
    assert left == [], f"Ray processes left behind: {left}"
