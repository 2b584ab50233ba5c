"""The engine-start guard (core/engine_guard.py) and the tier check built on it (tests/conftest.py):
this file is not marked `engine`, so it runs with the guard on, as every fast-tier test does."""
from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest

from adapters.spec import ServingSpec
from core.engine_guard import ENV, EngineStartRefused, check_start
from tests.conftest import run_cli


def _take_refusals() -> list[str]:
    """Read and clear what this test's refusals recorded (else its teardown fails the test)."""
    path = Path(os.environ[ENV])
    lines = path.read_text().splitlines() if path.exists() else []
    path.unlink(missing_ok=True)
    return lines


def test_unmarked_tests_run_with_the_guard_on_and_a_start_is_refused_and_recorded():
    assert os.environ.get(ENV) not in (None, "", "1")  # a file: conftest reads it at teardown
    with pytest.raises(EngineStartRefused) as e:
        check_start("a test engine")
    assert str(e.value) == f"refused to start a test engine: {ENV} is set (unset it to start engines)"
    assert [ln.split(" ", 1)[1] for ln in _take_refusals()] == ["a test engine"]


def test_in_process_engine_and_direct_subprocesses_are_refused():
    from backends.hf.reference import HFBackend

    with pytest.raises(EngineStartRefused, match="the transformers engine"):
        asyncio.run(HFBackend(ServingSpec(model="/nonexistent")).__aenter__())
    with pytest.raises(EngineStartRefused, match="a subprocess \\(docker ps"):
        subprocess.Popen(["docker", "ps"])
    assert len(_take_refusals()) == 2
    assert subprocess.run(["true"]).returncode == 0  # anything else starts as usual


def test_a_compare_command_under_the_guard_refuses_with_one_line(tmp_path, tiny_model):
    p = run_cli("run", "--backends", "hf", "--model", str(tiny_model), "--num-requests", "2", "--out", str(tmp_path),
                env={ENV: "1"})  # "1": refuse without recording, so this test's teardown stays clean
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().splitlines()[-1] == \
        f"error: refused to start the transformers engine (in-process): {ENV} is set (unset it to start engines)"
    assert "Traceback" not in p.stderr
    fake = run_cli("run", "--backends", "fake", "--model", str(tiny_model), "--num-requests", "2",
                   "--out", str(tmp_path), "--run-id", "f")  # the fake engine is no engine: it runs
    assert fake.returncode == 0, fake.stderr
