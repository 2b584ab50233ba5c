"""The vLLM OpenAI server as a subprocess vs the in-process engine, in ONE command, and the
process-group guarantees (no server is ever left behind)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from compare.results import iter_records
from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parent.parent


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purpose
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_guard_kills_the_group_when_the_benchmark_is_killed(tmp_path):
    """SIGKILL the process that launched a server: the guard must still take the server down."""
    pidfile = tmp_path / "child.pid"
    child = tmp_path / "child.py"
    child.write_text(f"import os, time\nopen({str(pidfile)!r}, 'w').write(str(os.getpid()))\ntime.sleep(600)\n")
    launcher = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from backends.vllm_server import ServerProcess\n"
        f"ServerProcess([sys.executable, {str(child)!r}], Path({str(tmp_path / 'log')!r})).start()\n"
        "time.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", launcher], cwd=ROOT)
    for _ in range(300):
        if pidfile.exists() and pidfile.read_text():
            break
        time.sleep(0.1)
    server_pid = int(pidfile.read_text())
    assert _alive(server_pid)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    for _ in range(100):
        if not _alive(server_pid):
            break
        time.sleep(0.1)
    assert not _alive(server_pid), "server survived its launcher"


@pytest.mark.engine
@pytest.mark.timeout(1500)
def test_inprocess_vs_server_one_command(tmp_path):
    out = tmp_path / "res"
    p = run_cli("run", "--backends", "vllm,vllm-server", "--num-requests", "4", "--input-len", "16",
                "--output-len", "8", "--concurrency", "2", "--warmup", "1", "--out", str(out), "--run-id", "x",
                "--format", "json", timeout=1400)
    assert p.returncode == 0, p.stderr[-3000:]
    run = json.loads((out / "x" / "run.json").read_text())
    srv = run["backends"]["vllm-server"]
    assert srv["status"] == "complete" and run["backends"]["vllm"]["status"] == "complete"
    # the same engine config reached both
    assert srv["describe"]["native_config"]["engine_args"] == run["backends"]["vllm"]["describe"]["native_config"]["engine_args"]
    lvl = srv["levels"]["c2"]
    assert lvl["ok"] == 4 and lvl["server_metrics"]["available"]
    assert lvl["server_metrics"]["server_ttft_ms"]["count"] == 4  # the engine saw exactly our 4 requests
    assert lvl["server_metrics"]["counters"]["vllm:generation_tokens_total"] == 4 * 8
    # greedy fp32: the server and the in-process engine produce the same tokens for each request
    recs = {}
    for r in iter_records(out / "x"):
        recs.setdefault(r.backend, {})[r.request_id] = r.token_ids
    assert recs["vllm"] == recs["vllm-server"] and all(len(v) == 8 for v in recs["vllm"].values())
    log = srv["describe"]["extra"]["server_log"]
    assert log and Path(log).exists() and "Application startup complete" in Path(log).read_text()
    # nothing left running from this run
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert log not in ps and srv["describe"]["native_config"]["base_url"].rsplit(":", 1)[1] not in \
        "".join(line for line in ps.splitlines() if "api_server" in line)
