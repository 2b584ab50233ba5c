"""`compare run --backends llamacpp` stopped while it prepares the engine, as a user would stop it:
Ctrl-C (SIGINT to the whole process group), SIGKILL of the whole group, and SIGTERM to the
`compare` process alone (`kill PID`: the converter or the build does not get it). Each time:
nothing half-published in the engine cache, no process left, the run directory says what
happened, and the next `compare run` prepares again.

The GGUF conversion of the tiny model is short (seconds), so it is stopped while its converter
process runs, three times in a row (one way each), and each next run converts again; the run after
the third completes. llama.cpp's build takes tens of
minutes on a small machine: it is stopped in its configure step and in its compile step (each
reached in seconds), and the next run is shown to resume the work directory (its compile step
has fewer steps left), not to finish the build."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from tests.backends.test_llamacpp_cache_cli import RUN, _gguf_entries, empty_engine_cache
from tests.conftest import VENV_BIN

pytestmark = pytest.mark.engine


@pytest.fixture
def fresh_cache(tmp_path):
    return empty_engine_cache(tmp_path)


def _start(tiny_model: Path, out: Path, rid: str, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([str(VENV_BIN / "compare"), "run", *RUN, "--model", str(tiny_model), "--out", str(out),
                             "--run-id", rid], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, **env}, start_new_session=True)


def _wait_for(p: subprocess.Popen, ready, what: str, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert p.poll() is None, f"compare run ended before {what}: {p.stdout.read()[-2000:] if p.stdout else ''}"
        if ready():
            return
        time.sleep(0.01)
    raise AssertionError(f"never reached: {what}")


def _children(p: subprocess.Popen, needle: str) -> list[psutil.Process]:
    out = []
    for c in psutil.Process(p.pid).children(recursive=True):
        try:
            if needle in " ".join(c.cmdline()) and c.status() != psutil.STATUS_ZOMBIE:
                out.append(c)
        except psutil.Error:
            pass
    return out


def _left(root: Path, timeout_s: float = 20) -> list[str]:
    """Live processes working in the engine cache ``root`` (a converter, cmake, ninja, a compiler),
    after up to ``timeout_s`` for the reaper of a killed run to end them."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = []
        for q in psutil.process_iter(["cmdline", "status"]):
            cmd = " ".join(q.info["cmdline"] or [])
            if str(root) in cmd and q.info["status"] != psutil.STATUS_ZOMBIE:
                left.append(f"{q.pid} {cmd[:160]}")
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def _stop(p: subprocess.Popen, how: str) -> str:
    sig = {"ctrl-c": signal.SIGINT, "sigkill": signal.SIGKILL, "sigterm": signal.SIGTERM}[how]
    if how == "sigterm":
        os.kill(p.pid, sig)  # `kill PID`: only compare gets it
    else:
        os.killpg(p.pid, sig)  # the terminal's Ctrl-C, or the whole group killed
    out, _ = p.communicate(timeout=120)
    return out


def _status(run_dir: Path) -> tuple[str, str | None]:
    run = json.loads((run_dir / "run.json").read_text())
    b = run["backends"].get("llamacpp", {})
    return run["status"], b.get("error")


def _stop_converting(tiny_model: Path, out: Path, rid: str, root: Path, env: dict[str, str], how: str) -> None:
    """Start a run into the engine cache ``root`` (no GGUF yet), stop it ``how`` while its converter
    runs, and check what it left: no entry, no process, the run directory says what happened."""
    p = _start(tiny_model, out, rid, env)
    try:
        _wait_for(p, lambda: _children(p, "backends.llamacpp.convert_main"), "the GGUF converter started", 600)
        time.sleep(0.3)  # (it is under way: importing, reading the checkpoint)
        [converter] = _children(p, "backends.llamacpp.convert_main")
        t0 = time.monotonic()
        said = _stop(p, how)
        took = time.monotonic() - t0
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    log = (out / rid / "logs" / "llamacpp.log").read_text()
    assert "to GGUF f32" in log and "GGUF f32 written" not in log, (how, log)  # stopped mid-conversion
    assert "Traceback" not in said, said[-2000:]
    assert not _gguf_entries(root), f"a GGUF was published by a run stopped by {how}"
    assert not _left(root), _left(root)
    assert not converter.is_running() or converter.status() == psutil.STATUS_ZOMBIE
    if how == "sigkill":
        assert p.returncode == -signal.SIGKILL
        assert _status(out / rid)[0] == "running"  # recorded as killed by the next command (below)
    else:
        assert p.returncode == {"ctrl-c": 130, "sigterm": 143}[how], said[-2000:]
        assert took < 30, f"the stop ({how}) waited {took:.0f} s (for the conversion to end?)"
        status, error = _status(out / rid)
        assert status == "interrupted" and "before its levels ran" in (error or ""), (how, status, error)
        # the step was ended and its temp dir dropped at once, by the stopping run itself; the one a
        # killed converter left (the SIGKILL run before) was swept by this run before it converted
        assert not [d for d in (root / ".tmp").glob("*") if d.is_dir()], how


def test_a_run_stopped_while_converting_the_gguf(tiny_model, tmp_path, fresh_cache):
    """SIGKILL of the group, then Ctrl-C, then `kill PID`, each while the converter runs, each run
    after the last one's stop: every next run converts again (nothing usable was left), and the
    last one completes with ONE entry (one completing run for the three stops)."""
    root, env = fresh_cache
    out = tmp_path / "o"
    _stop_converting(tiny_model, out, "a", root, env, "sigkill")
    _stop_converting(tiny_model, out, "b", root, env, "ctrl-c")
    assert _status(out / "a")[0] == "killed"  # the next run in that results root recorded it
    _stop_converting(tiny_model, out, "c", root, env, "sigterm")

    r = subprocess.run([str(VENV_BIN / "compare"), "run", *RUN, "--model", str(tiny_model), "--out", str(out),
                        "--run-id", "d"], capture_output=True, text=True, env={**os.environ, **env}, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    log_d = (out / "d" / "logs" / "llamacpp.log").read_text()
    assert "to GGUF f32" in log_d and "GGUF f32 written" in log_d, log_d[-2000:]  # converted again
    assert _status(out / "d")[0] == "complete"
    assert len(_gguf_entries(root)) == 1
    assert not [d for d in (root / ".tmp").glob("*") if d.is_dir()]
    assert [_status(out / rid)[0] for rid in "abc"] == ["killed", "interrupted", "interrupted"]
    assert not _left(root), _left(root)


def _build_log(root: Path) -> str:
    logs = list(root.glob(".work/*/build.log"))
    return logs[0].read_text(errors="replace") if logs else ""


def _steps(log: str) -> list[tuple[int, int]]:
    return [(int(a), int(b)) for a, b in re.findall(r"^\[(\d+)/(\d+)\]", log, re.M)]


def test_a_run_stopped_while_building_llama_cpp(tiny_model, tmp_path, fresh_cache):
    """No prebuilt llama-server: the run builds llama.cpp into a fresh engine cache (from the
    pinned source the machine has). Killed (the whole group) once configuring has written
    CMakeCache.txt but not yet build.ninja; then Ctrl-C once compiling; then `kill PID` while
    compiling. Each time nothing is published, no cmake, ninja or compiler is left, and the
    next run resumes the work directory."""
    root, env = fresh_cache
    env = {k: v for k, v in env.items() if k != "LLM_COMPARE_LLAMA_SERVER"}
    out = tmp_path / "o"

    # 1. SIGKILL of the group at the end of configuring (CMake writes its cache, then generates)
    p = _start(tiny_model, out, "a", env)
    try:
        _wait_for(p, lambda: list(root.glob(".work/*/build/CMakeCache.txt")), "configured", 600)
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    builds = list(root.glob(".work/*/build"))
    assert builds and not (builds[0] / "build.ninja").exists(), "killed too late to leave a half-configured tree"
    assert not _left(root), _left(root)
    assert not list(root.glob("*/meta.json"))

    # 2. the next run configures again (a tree without build.ninja is no configured tree), compiles;
    # Ctrl-C once a few objects are compiled
    p = _start(tiny_model, out, "b", env)
    try:
        _wait_for(p, lambda: len(_steps(_build_log(root))) >= 3, "three compile steps done", 900)
        said = _stop(p, "ctrl-c")
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 130 and "Traceback" not in said, said[-2000:]
    assert _status(out / "b")[0] == "interrupted" and _status(out / "a")[0] == "killed"
    assert _build_log(root).count("$ cmake -S") == 2  # configured again, not `cmake --build` on a half tree
    total_b = _steps(_build_log(root))[0][1]
    assert not _left(root), _left(root)
    assert not list(root.glob("*/meta.json")) and not [d for d in (root / ".tmp").glob("*") if d.is_dir()]

    # 3. `kill PID` (SIGTERM to compare alone) while compiling: the build step is ended at once
    # (compilers included), nothing published; it resumed where the last one stopped
    n = len(_steps(_build_log(root)))
    p = _start(tiny_model, out, "c", env)
    try:
        _wait_for(p, lambda: len(_steps(_build_log(root))) > n and _children(p, "cc1"), "compiling again", 600)
        t0 = time.monotonic()
        said = _stop(p, "sigterm")
        took = time.monotonic() - t0
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 143 and "Traceback" not in said, said[-2000:]
    assert took < 30, f"the stop waited {took:.0f} s for the build"
    assert _status(out / "c")[0] == "interrupted"
    total_c = _steps(_build_log(root))[n][1]
    assert total_c < total_b, (total_b, total_c)  # resumed: fewer steps left than the last build had
    assert _build_log(root).count("$ cmake -S") == 2  # configured once the tree was whole
    assert not _left(root), _left(root)
    assert not list(root.glob("*/meta.json")) and not [d for d in (root / ".tmp").glob("*") if d.is_dir()]
