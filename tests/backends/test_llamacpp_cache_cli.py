"""The engine cache's faults through the CLI, with the real llama.cpp GGUF conversion, all in ONE
fresh engine cache (LLM_COMPARE_ENGINE_CACHE; the llama-server build and the pinned converter
source are the ones the machine already has, built by the set-up), in this order:

- three runs stopped while the converter runs, as a user would stop them: SIGKILL of the whole
  group, Ctrl-C (SIGINT to the group), SIGTERM to the `compare` process alone (`kill PID`: the
  converter does not get it). Each time nothing is half-published, no process is left, the run
  directory says what happened, the stop does not wait for the conversion, and the next run
  converts again;
- two runs that need the same GGUF at once (the runs after the third stop) convert it once (the
  second waits on the first, or finds it made), and both complete;
- the entry they leave, damaged on disk, is detected by its digest and made again by the next run.
The same stops while llama.cpp builds: tests/backends/test_llamacpp_interrupted_cli.py."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from tests.backends.llamacpp_cli import (RUN, children, empty_engine_cache, gguf_entries, left, start, status,
                                         stop, wait_for)
from tests.conftest import VENV_BIN, run_cli

pytestmark = pytest.mark.engine
STOPS = ("sigkill", "ctrl-c", "sigterm")  # SIGKILL first: the next run records it killed, sweeps its temp dir


def _stop_converting(tiny_model: Path, out: Path, rid: str, root: Path, env: dict[str, str], how: str) -> None:
    """Start a run into the engine cache ``root`` (no GGUF yet), stop it ``how`` while its converter
    runs, and check what it left: no entry, no process, the run directory says what happened."""
    p = start(tiny_model, out, rid, env)
    try:
        wait_for(p, lambda: children(p, "backends.llamacpp.convert_main"), "the GGUF converter started", 600)
        time.sleep(0.3)  # (it is under way: importing, reading the checkpoint)
        [converter] = children(p, "backends.llamacpp.convert_main")
        t0 = time.monotonic()
        said = stop(p, how)
        took = time.monotonic() - t0
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    log = (out / rid / "logs" / "llamacpp.log").read_text()
    assert "to GGUF f32" in log and "GGUF f32 written" not in log, (how, log)  # stopped mid-conversion
    assert "Traceback" not in said, said[-2000:]
    assert not gguf_entries(root), f"a GGUF was published by a run stopped by {how}"
    assert not left(root), left(root)
    assert not converter.is_running() or converter.status() == psutil.STATUS_ZOMBIE
    if how == "sigkill":
        assert p.returncode == -signal.SIGKILL
        assert status(out / rid)[0] == "running"  # recorded as killed by the next command
    else:
        assert p.returncode == {"ctrl-c": 130, "sigterm": 143}[how], said[-2000:]
        assert took < 30, f"the stop ({how}) waited {took:.0f} s (for the conversion to end?)"
        state, error = status(out / rid)
        assert state == "interrupted" and "before its levels ran" in (error or ""), (how, state, error)
        # the step was ended and its temp dir dropped at once, by the stopping run itself; the one a
        # killed converter left (the SIGKILL run before) was swept by this run before it converted
        assert not [d for d in (root / ".tmp").glob("*") if d.is_dir()], how


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return empty_engine_cache(tmp_path_factory.mktemp("gguf-cache"))


@pytest.fixture(scope="module")
def stopped(tiny_model, cache, tmp_path_factory) -> Path:
    """The three stopped runs, one after the other (each asserted as it is stopped: a failure here
    names the stop); their results root."""
    root, env = cache
    out = tmp_path_factory.mktemp("stopped")
    for rid, how in zip("abc", STOPS):
        _stop_converting(tiny_model, out, rid, root, env, how)
        if rid == "b":  # the run after the SIGKILLed one recorded it
            assert status(out / "a")[0] == "killed"
    return out


@pytest.fixture(scope="module")
def two_runs(tiny_model, cache, stopped, tmp_path_factory):
    """Two `compare run`s started at once, after the stops, that both need the cache's GGUF: ONE pair
    per module, since the entry they leave is also the one the damage test cuts short."""
    root, env = cache
    tmp = tmp_path_factory.mktemp("pair")
    procs = [subprocess.Popen([str(VENV_BIN / "compare"), "run", *RUN, "--model", str(tiny_model),
                               "--out", str(tmp / "o"), "--run-id", rid], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env={**os.environ, **env})
             for rid in ("a", "b")]
    outs = [p.communicate(timeout=900) for p in procs]
    logs = [(tmp / "o" / rid / "logs" / "llamacpp.log").read_text() if (tmp / "o" / rid / "logs").exists() else ""
            for rid in ("a", "b")]
    # what the tests below assert, taken before the damage test touches the cache
    return SimpleNamespace(root=root, env=env, codes=[p.returncode for p in procs], errs=[o[1] for o in outs],
                           logs=logs, entries=gguf_entries(root),
                           half_built=[p for p in (root / ".tmp").glob("*") if p.is_dir()],
                           states=[status(tmp / "o" / rid)[0] for rid in ("a", "b") if (tmp / "o" / rid).exists()],
                           left=left(root))


def test_a_run_stopped_while_converting_the_gguf(stopped, two_runs):
    """Each stop asserted as it happened (the `stopped` fixture); after the last, the next runs
    convert again and complete, and the stopped runs say how they ended."""
    assert [status(stopped / rid)[0] for rid in "abc"] == ["killed", "interrupted", "interrupted"]
    assert two_runs.codes == [0, 0], [e[-1500:] for e in two_runs.errs]
    assert any("to GGUF f32" in log and "GGUF f32 written" in log for log in two_runs.logs), two_runs.logs
    assert two_runs.states == ["complete", "complete"]
    assert len(two_runs.entries) == 1 and not two_runs.half_built  # the killed converter's temp dir: swept
    assert not two_runs.left, two_runs.left


def test_two_runs_needing_one_gguf_convert_it_once(two_runs):
    assert two_runs.codes == [0, 0], [e[-1500:] for e in two_runs.errs]
    assert sorted(log.count("to GGUF f32") for log in two_runs.logs) == [0, 1], [log[-1500:] for log in two_runs.logs]
    assert len(two_runs.entries) == 1
    assert not two_runs.half_built  # no half-built entry left


def test_a_damaged_gguf_entry_is_made_again_by_the_next_run(tiny_model, tmp_path, two_runs):
    root, env = two_runs.root, two_runs.env
    assert two_runs.codes == [0, 0], [e[-1500:] for e in two_runs.errs]  # (the runs that made the entry)
    [entry] = gguf_entries(root)
    gguf = entry / "model.gguf"
    size = gguf.stat().st_size
    with open(gguf, "r+b") as f:  # cut short, as a full disk or a killed copy would leave it
        f.truncate(size // 2)
    r = run_cli("run", *RUN, "--model", str(tiny_model), "--out", str(tmp_path / "o"), "--run-id", "b", env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    said = (tmp_path / "o" / "b" / "logs" / "llamacpp.log").read_text()  # the backend's preparation logs there
    assert "is damaged" in said and "building it again" in said and "to GGUF f32" in said, said[-2000:]
    assert [p.name for p in gguf_entries(root)] == [entry.name] and gguf.stat().st_size == size
    run = json.loads((tmp_path / "o" / "b" / "run.json").read_text())
    assert run["backends"]["llamacpp"]["status"] == "complete"
