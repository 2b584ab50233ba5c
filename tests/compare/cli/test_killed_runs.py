"""Runs killed outright (SIGKILL, the OOM killer) are recorded as killed by the next command that
looks; a run id whose run never measured may be used again, one that measured never
(docs/bad-input.md#runs-killed-outright)."""
import json
import signal
import subprocess
import sys
import time

import pytest

from tests.compare.cli.test_cli_bad_input import assert_one_line_error
from tests.conftest import ROOT, run_cli


# ---------------------------------------------------------------- 4. a run killed outright

# A real process writes a run and is SIGKILLed mid-level, as the OOM killer would: three of four
# requests of level c1 recorded, run.json still "running". No engine is needed to test the record.
KILLED_CHILD = r"""
import os, signal, sys
from pathlib import Path
from core.records import RequestRecord
from core.results.io import ResultsWriter
w = ResultsWriter(Path(sys.argv[1]), sys.argv[2], {
    "levels": [{"kind": "concurrency", "value": 1, "label": "c1"}, {"kind": "concurrency", "value": 2, "label": "c2"}],
    "workload": {"num_requests": 4}})
w.update_backend("hf", status="running")
w.flush()
t = 10**9
for i in range(3):
    s = t + i * 10**8
    w.add_record(RequestRecord(request_id=f"r{i}", backend="hf", level="c1", t_sent_ns=s,
                               event_times_ns=(s + 10**7, s + 2 * 10**7), event_token_counts=(1, 1),
                               t_end_ns=s + 2 * 10**7, finish_reason="length", requested_tokens=2, prompt_tokens=4))
os.kill(os.getpid(), signal.SIGKILL)
"""


def _killed_run(root, rid="k1"):
    p = subprocess.run([sys.executable, "-c", KILLED_CHILD, str(root), rid], cwd=ROOT, capture_output=True,
                       timeout=120)
    assert p.returncode == -signal.SIGKILL, p.stderr
    d = root / rid
    run = json.loads((d / "run.json").read_text())
    assert run["status"] == "running" and run["owner"]["pid"] > 0 and run["owner"]["start_ticks"] is not None
    return d


@pytest.mark.parametrize("command", ["report", "check", "clean", "run"])
def test_killed_run_is_recorded_as_killed_by_the_next_command(tmp_path, command):
    root = tmp_path / "results"
    d = _killed_run(root)
    if command == "report":
        p = run_cli("report", str(d))
        assert p.returncode == 0, p.stderr
        assert "(killed)" in p.stdout
    elif command == "check":
        (tmp_path / "b").mkdir()
        run_cli("check", str(d), "--baseline", "none", "--dir", str(tmp_path / "b"))  # refused: no baseline
    elif command == "clean":
        p = run_cli("clean", "--dry-run", "--out", str(root))
        assert "would record run k1" in p.stdout, p.stdout
        assert json.loads((d / "run.json").read_text())["status"] == "running"  # a dry run changes nothing
        p = run_cli("clean", "--out", str(root))
        assert "run k1" in p.stdout and "recorded as killed" in p.stdout, p.stdout
    else:  # a new run in the same results root; this one asks for the killed run's id: still taken
        p = run_cli("run", "--backends", "hf", "--out", str(root), "--run-id", "k1")
        assert p.returncode == 2 and "already exists" in p.stderr and "Traceback" not in p.stderr
        assert "note: run k1" in p.stderr and "recorded as killed" in p.stderr
    run = json.loads((d / "run.json").read_text())
    assert run["status"] == "killed", run
    assert "SIGKILL" in run["error"] and "3 requests kept" in run["error"]
    hf = run["backends"]["hf"]
    assert hf["status"] == "killed" and "in level c1" in hf["error"]
    c1 = hf["levels"]["c1"]
    assert c1["requests"] == 3 and c1["ok"] == 3 and c1["aborted"].startswith("killed: 3 of 4 requests")
    assert abs(c1["ttft_ms"]["p50"] - 10.0) < 1e-6
    assert "c2" not in hf["levels"]
    assert not [p for p in d.iterdir() if p.name.startswith(".")], "the reserve and temp files are gone"


def test_live_or_unknown_owner_is_left_running(tmp_path):
    from compare.cli.killed import settle
    from core.results.io import ResultsWriter
    from core.results.owner import owner_alive

    w = ResultsWriter(tmp_path, "live", {})  # this process: alive
    assert owner_alive(w.run["owner"]) is True
    assert settle(w.dir) is None
    # the same pid with another start time is a reused pid: gone
    assert owner_alive({**w.run["owner"], "start_ticks": w.run["owner"]["start_ticks"] - 1}) is False
    assert owner_alive({**w.run["owner"], "boot_id": "another-boot"}) is False
    assert owner_alive({**w.run["owner"], "host": "another-host"}) is None  # cannot tell from here
    assert owner_alive(None) is None  # written before owners were recorded
    w.finish("complete")


@pytest.mark.engine
def test_sigkilled_real_run_is_recorded_as_killed(tmp_path, tiny_model):
    """The transformers backend on the tiny model, SIGKILLed once it has recorded a request."""
    root = tmp_path / "results"
    argv = [sys.executable, "-m", "compare.cli", "run", "--backends", "hf", "--model", str(tiny_model),
            "--num-requests", "40", "--input-len", "16", "--output-len", "32", "--concurrency", "1",
            "--warmup", "0", "--out", str(root), "--run-id", "k", "-q"]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    reqs = root / "k" / "requests.jsonl"
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            if reqs.exists() and reqs.read_bytes().count(b"\n") >= 2:
                break
            time.sleep(0.2)
        assert proc.poll() is None, "the run ended before it could be killed"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=60)
    assert json.loads((root / "k" / "run.json").read_text())["status"] == "running"
    p = run_cli("report", str(root / "k"))
    assert p.returncode == 0, p.stderr
    run = json.loads((root / "k" / "run.json").read_text())
    assert run["status"] == "killed" and run["backends"]["hf"]["status"] == "killed"
    kept = run["backends"]["hf"]["levels"]["c1"]
    assert kept["requests"] >= 2 and kept["aborted"].startswith("killed:")


# ---------------------------------------------------------------- 5. a run that failed before it started


@pytest.mark.engine  # asks Ray for a cluster (none is there)
def test_run_id_of_a_run_that_never_started_can_be_used_again(tmp_path):
    pytest.importorskip("ray")
    out = tmp_path / "r"
    env = {"RAY_ADDRESS": ""}
    for _ in range(2):  # no cluster: fails at start both times, never "already exists"
        p = run_cli("run", "--backends", "hf", "--ray", "auto", "--run-id", "same", "--out", str(out), env=env)
        assert p.returncode == 2, p.stderr
        assert "cannot join the Ray cluster" in p.stderr and "already exists" not in p.stderr
    assert json.loads((out / "same" / "run.json").read_text())["status"] == "failed"
    assert [x.name for x in out.iterdir()] == ["same"], "the replaced attempt is gone"


def test_run_id_with_measurements_is_never_reused(tmp_path):
    from core.errors import UserError
    from core.results.io import check_results_dir_free, create_results_dir

    d = _killed_run(tmp_path)  # measured 3 requests, then killed
    for _ in range(2):
        with pytest.raises(UserError, match="already exists"):
            check_results_dir_free(tmp_path, "k1")
        with pytest.raises(UserError, match="already exists"):
            create_results_dir(tmp_path, "k1")
    assert (d / "requests.jsonl").stat().st_size > 0
