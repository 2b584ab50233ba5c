"""The stop policy of `compare run` (compare/running/aio.py) on the fake engine (backends/fake/, a
test instrument): SIGINT, SIGTERM and SIGHUP each stop sending, keep the requests in flight as
cancelled records, summarise the completed part of the level (aborted), mark the run interrupted
and exit 128 + signal with one line; a signal during the final teardown neither cuts it short nor
calls the results partial; `compare clean` removes only what dead runs left. What each real engine
leaves behind when stopped is test_signals_e2e.py's subject."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from containers.watchdog import TAG_ENV
from tests.compare.running.test_signals_e2e import Stopped, _assert_interrupted, _lines, _running
from tests.conftest import ROOT, VENV_BIN, run_cli

# 2 ms per token: a 64-token request takes ~0.14 s, so the 400 requests at concurrency 2 (~28 s)
# outlast the signal (sent once 2 requests are written) by many seconds, even on a loaded machine
FAKE = ("--native", "fake.ttft=10ms", "--native", "fake.itl=2ms")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_stopped_mid_level_by_each_signal(tmp_path, tiny_model, sig):
    s = Stopped(tmp_path, "fake", sig, args=("--model", str(tiny_model), *FAKE))
    _assert_interrupted(s, sig, "fake")
    assert s.stopped_s < 60  # bounded: cancel, summarise, teardown


def test_signal_during_the_final_teardown_leaves_complete_results(tmp_path, tiny_model):
    """Every request finished: Ctrl-C (twice) while the engine shuts down (the fake's takes 2 s)
    must neither cut the teardown short nor call the results partial."""
    d = tmp_path / "t"
    proc = subprocess.Popen(
        [str(VENV_BIN / "compare"), "run", "--backends", "fake", "--model", str(tiny_model), *FAKE,
         "--native", "fake.stop=2s", "--num-requests", "4", "--output-len", "16", "--concurrency", "4",
         "--warmup", "1", "--out", str(tmp_path), "--run-id", "t"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    me = psutil.Process(proc.pid)
    try:
        deadline = time.time() + 300
        # the level's row in run.json: written once the level is summarised, right before the
        # engine's teardown begins
        while "c4" not in _levels(d):
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.time() < deadline
            time.sleep(0.05)
        tree = me.children(recursive=True)
        time.sleep(0.3)  # into the teardown (2 s)
        assert proc.poll() is None
        t_sig = time.time()
        os.kill(proc.pid, signal.SIGINT)
        time.sleep(0.3)
        os.kill(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err[-2000:]
    assert time.time() - t_sig >= 0.5  # the rest of the 2 s teardown ran to its end
    last = [ln for ln in err.splitlines() if ln.startswith("interrupted")]
    assert len(last) == 1 and "the run had finished; its teardown was completed" in last[0], err[-2000:]
    assert "run status complete" in last[0]
    run = json.loads((d / "run.json").read_text())
    assert run["status"] == "complete" and "during the final teardown" in run["error"]
    assert run["backends"]["fake"]["status"] == "complete"
    assert "aborted" not in run["backends"]["fake"]["levels"]["c4"]
    assert all(x["error_kind"] is None for x in _lines(d / "requests.jsonl"))
    # up to 2 s to go, as before; a zombie has ended (where no init reaps it, waiting on it as
    # psutil.wait_procs does would spend the 2 s every time)
    deadline = time.time() + 2
    while [p for p in tree if _running(p)] and time.time() < deadline:
        time.sleep(0.05)
    assert not [p.pid for p in tree if _running(p)]


def _levels(d) -> dict:
    try:
        return json.loads((d / "run.json").read_text())["backends"]["fake"]["levels"]
    except (OSError, ValueError, KeyError):  # not written yet
        return {}


def test_compare_clean_removes_only_what_dead_runs_left(tmp_path):
    sleeper = [sys.executable, "-c", "import time; time.sleep(300)"]
    # an owner that has exited: its tag names a dead process
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead_tag = f"{gone.pid}:{time.time() - 5:.2f}"
    me = psutil.Process()
    live_tag = f"{me.pid}:{me.create_time():.2f}"
    base = {k: v for k, v in os.environ.items() if k != TAG_ENV}
    orphan = subprocess.Popen(sleeper, env={**base, TAG_ENV: dead_tag})
    owned = subprocess.Popen(sleeper, env={**base, TAG_ENV: live_tag})  # its run is alive
    untagged = subprocess.Popen(sleeper, env=base)
    try:
        time.sleep(0.5)
        dry = run_cli("clean", "--dry-run")
        assert dry.returncode == 0, dry.stderr
        # a `compare run` of the suite's other worker may have removed the orphan first (below)
        assert f"would remove process {orphan.pid} " in dry.stdout or orphan.poll() is not None, dry.stdout
        r = run_cli("clean")
        assert r.returncode == 0, r.stderr
        # every `compare run` also cleans up after dead runs before it measures: with the suite's
        # other worker running one, that run may have removed the orphan first
        if f"removed process {orphan.pid} " in r.stdout:
            assert f"of dead run owner {dead_tag}" in r.stdout
        assert str(owned.pid) not in r.stdout and str(untagged.pid) not in r.stdout
        assert orphan.wait(timeout=10) is not None
        assert owned.poll() is None and untagged.poll() is None
    finally:
        for p in (orphan, owned, untagged):
            if p.poll() is None:
                p.kill()
                p.wait()


def test_terminate_does_not_wait_out_the_grace_period_on_a_zombie(tmp_path):
    """A stopped process whose live parent does not reap it stays a zombie: it is dead, and
    `compare clean` (or the clean-up before a run) must not spend the grace period, then the kill's,
    on it. Here the parent sleeps without reaping; before, this took twice the grace period."""
    from containers.watchdog import terminate

    parent = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time\n"
                               "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
                               "print(c.pid, flush=True)\ntime.sleep(300)"], stdout=subprocess.PIPE, text=True)
    try:
        child = psutil.Process(int(parent.stdout.readline()))
        t0 = time.monotonic()
        assert [p.pid for p in terminate([child], grace_s=30)] == [child.pid]
        assert time.monotonic() - t0 < 15  # (0.05 s polls; not the 30 s grace)
        assert child.status() == psutil.STATUS_ZOMBIE  # its parent has not reaped it
    finally:
        parent.kill()
        parent.wait()
