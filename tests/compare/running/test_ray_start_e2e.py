"""``compare run --ray 127.0.0.1:PORT`` against a head started with ``ray start``, and ``ray stop``
leaving nothing behind."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile

import pytest

from tests.compare.running.test_ray_e2e import LOOPBACK, SMALL_STORE, VENV_BIN, WORKLOAD, _kill_left
from tests.conftest import TINY_SPEC_ARGS, run_cli

ray = pytest.importorskip("ray")


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
    finally:
        stop = subprocess.run([ray_bin, "stop"], env=env, capture_output=True, text=True, timeout=120)
        left = _kill_left(temp)
        shutil.rmtree(temp, ignore_errors=True)
    assert stop.returncode == 0, stop.stderr[-2000:]
    assert left == [], f"Ray processes left behind: {left}"
