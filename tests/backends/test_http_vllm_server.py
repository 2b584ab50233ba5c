"""The vLLM OpenAI server as a subprocess vs the in-process engine, in ONE run (the session's shared
prefix_run, tests/conftest.py), and the process-group guarantees (no server is ever left behind)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import PREFIX_C, PREFIX_SEQS, ROOT
from tests.conftest import PREFIX_N as N
from tests.conftest import PREFIX_OUT as OUT


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purpose
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


@pytest.mark.engine  # a server process tree (a stand-in child under the real guard)
def test_guard_kills_the_group_when_the_benchmark_is_killed(tmp_path):
    """SIGKILL the process that launched a server: the guard must still take the server down."""
    pidfile = tmp_path / "child.pid"
    child = tmp_path / "child.py"
    child.write_text(f"import os, time\nopen({str(pidfile)!r}, 'w').write(str(os.getpid()))\ntime.sleep(600)\n")
    launcher = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from backends.server_process import ServerProcess\n"
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
def test_inprocess_vs_server_one_command(prefix_run):
    """``vllm`` and ``vllm-server`` in one run (the session's prefix_run, tests/conftest.py: 12
    requests at concurrency 4, 24 output tokens, max_num_seqs 2 for both engines; prefix caching on
    in-process and off on the server, the one setting apart)."""
    run = prefix_run.run
    srv = run["backends"]["vllm-server"]
    assert srv["status"] == "complete" and run["backends"]["vllm"]["status"] == "complete"
    # the same engine config reached both, but for the setting the run set apart
    args = {n: dict(run["backends"][n]["describe"]["native_config"]["engine_args"]) for n in ("vllm", "vllm-server")}
    assert (args["vllm"].pop("enable_prefix_caching"), args["vllm-server"].pop("enable_prefix_caching")) == (True, False)
    assert args["vllm"] == args["vllm-server"] and args["vllm"]["max_num_seqs"] == PREFIX_SEQS
    # what the engine itself resolved (the knob that --vary and compare tune set; those run on the
    # fake engine, so this is where max_num_seqs reaching vLLM is checked)
    assert run["backends"]["vllm"]["describe"]["native_config"]["resolved"]["max_num_seqs"] == PREFIX_SEQS
    lvl = srv["levels"][f"c{PREFIX_C}"]
    assert lvl["ok"] == N and lvl["server_metrics"]["available"]
    assert lvl["server_metrics"]["server_ttft_ms"]["count"] == N  # the engine saw exactly this level's requests
    assert lvl["server_metrics"]["counters"]["vllm:generation_tokens_total"] == N * OUT
    # greedy fp32: the server and the in-process engine produce the same tokens for each request
    recs = {}
    for r in prefix_run.records:
        recs.setdefault(r.backend, {})[(r.level, r.request_id)] = r.token_ids
    assert len(recs["vllm"]) == N
    assert recs["vllm"] == recs["vllm-server"] and all(len(v) == OUT for v in recs["vllm"].values())
    log = srv["describe"]["extra"]["server_log"]
    assert log and Path(log).exists() and "Application startup complete" in Path(log).read_text()
    # nothing left running from this run
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert log not in ps and srv["describe"]["native_config"]["base_url"].rsplit(":", 1)[1] not in \
        "".join(line for line in ps.splitlines() if "api_server" in line)
