"""`compare run --backends llamacpp` stopped while it builds llama.cpp, as a user would stop it:
SIGKILL of the whole group, Ctrl-C (SIGINT to the whole process group) and SIGTERM to the
`compare` process alone (`kill PID`: the build does not get it). Each time: nothing half-published
in the engine cache, no process left, the run directory says what happened, and the next `compare
run` prepares again. llama.cpp's build takes tens of minutes on a small machine: it is stopped in
its configure step and in its compile step (each reached in seconds), and the next run is shown to
resume the work directory (its compile step has fewer steps left), not to finish the build.
The same three stops while the GGUF converter runs: tests/backends/test_llamacpp_cache_cli.py."""
from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest

from tests.backends.llamacpp_cli import children, empty_engine_cache, left, start, status, stop, wait_for

pytestmark = pytest.mark.engine


@pytest.fixture
def fresh_cache(tmp_path):
    return empty_engine_cache(tmp_path)


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
    p = start(tiny_model, out, "a", env)
    try:
        wait_for(p, lambda: list(root.glob(".work/*/build/CMakeCache.txt")), "configured", 600)
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    builds = list(root.glob(".work/*/build"))
    assert builds and not (builds[0] / "build.ninja").exists(), "killed too late to leave a half-configured tree"
    assert not left(root), left(root)
    assert not list(root.glob("*/meta.json"))

    # 2. the next run configures again (a tree without build.ninja is no configured tree), compiles;
    # Ctrl-C once a few objects are compiled
    p = start(tiny_model, out, "b", env)
    try:
        wait_for(p, lambda: len(_steps(_build_log(root))) >= 3, "three compile steps done", 900)
        said = stop(p, "ctrl-c")
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 130 and "Traceback" not in said, said[-2000:]
    assert status(out / "b")[0] == "interrupted" and status(out / "a")[0] == "killed"
    assert _build_log(root).count("$ cmake -S") == 2  # configured again, not `cmake --build` on a half tree
    total_b = _steps(_build_log(root))[0][1]
    assert not left(root), left(root)
    assert not list(root.glob("*/meta.json")) and not [d for d in (root / ".tmp").glob("*") if d.is_dir()]

    # 3. `kill PID` (SIGTERM to compare alone) while compiling: the build step is ended at once
    # (compilers included), nothing published; it resumed where the last one stopped
    n = len(_steps(_build_log(root)))
    p = start(tiny_model, out, "c", env)
    try:
        wait_for(p, lambda: len(_steps(_build_log(root))) > n and children(p, "cc1"), "compiling again", 600)
        t0 = time.monotonic()
        said = stop(p, "sigterm")
        took = time.monotonic() - t0
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 143 and "Traceback" not in said, said[-2000:]
    assert took < 30, f"the stop waited {took:.0f} s for the build"
    assert status(out / "c")[0] == "interrupted"
    total_c = _steps(_build_log(root))[n][1]
    assert total_c < total_b, (total_b, total_c)  # resumed: fewer steps left than the last build had
    assert _build_log(root).count("$ cmake -S") == 2  # configured once the tree was whole
    assert not left(root), left(root)
    assert not list(root.glob("*/meta.json")) and not [d for d in (root / ".tmp").glob("*") if d.is_dir()]
