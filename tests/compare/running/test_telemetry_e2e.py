"""CPU telemetry per level from real engines, read from the suite's shared runs (tests/conftest.py):
in-process vLLM (its engine-core process beside our client) and transformers in real_run, vLLM's
OpenAI server (API server + engine core, our client apart) in prefix_run; no GPU here, so each level
records why there is no GPU record, and the report shows the CPU table (and says why there are no
GPU numbers only where NVIDIA software is installed, i.e. a GPU was expected)."""
from __future__ import annotations

import ctypes.util
import shutil

import pytest

from core.results import RunResults
from compare.analysis.bottleneck import cpu_rows, gpu_note
from tests.conftest import run_cli

pytestmark = pytest.mark.engine  # the shared real runs (tests/conftest.py)

ENGINE = {"engine core", "engine worker"}
# no driver library and no nvidia-smi: nothing here expects a GPU
NO_NVIDIA_HERE = ctypes.util.find_library("nvidia-ml") is None and shutil.which("nvidia-smi") is None


def _levels(run: dict, backend: str):
    res = RunResults.model_validate(run).backends[backend]
    assert res.levels, res
    return res.levels.items()


def _plausible(t, roles: set[str]) -> dict[str, float]:
    by_role: dict[str, float] = {}
    for p in t.processes:
        assert 0 <= p.mean_pct <= 100 * t.cpu_cores and p.peak_pct <= 110 * t.cpu_cores, p
        assert p.threads >= 1 and p.samples >= 1, p
        by_role[p.role] = by_role.get(p.role, 0.0) + p.mean_pct
    assert roles <= set(by_role), (roles, by_role)
    return by_role


def test_in_process_vllm_and_hf_levels_record_client_and_engine_cpu(real_run):
    for label, s in _levels(real_run.run, "vllm"):
        t = s.telemetry
        assert t is not None and t.samples >= 1 and t.wall_s > 0, (label, t)
        by_role = _plausible(t, {"client", "engine core"})
        assert by_role["client"] > 0, (label, by_role)  # our loop timed every token
        assert sum(v for r, v in by_role.items() if r in ENGINE) > 0, (label, by_role)  # the model ran there
        client = t.processes[0]
        assert client.role == "client" and client.loop_thread_mean_pct is not None
        assert client.loop_thread_mean_pct <= client.mean_pct + 5  # one of its threads
        assert t.gpu is None and t.gpu_note.startswith("no GPU telemetry"), t
    for label, s in _levels(real_run.run, "hf"):  # transformers computes inside our own process
        by_role = _plausible(s.telemetry, {"client"})
        assert by_role["client"] > 5, (label, by_role)
    note = gpu_note(RunResults.model_validate(real_run.run))
    assert note is None if NO_NVIDIA_HERE else note.startswith("no GPU telemetry"), note


def test_vllm_server_levels_record_its_api_server_and_engine_core(prefix_run):
    for label, s in _levels(prefix_run.run, "vllm-server"):
        by_role = _plausible(s.telemetry, {"client", "API server", "engine core", "server guard"})
        assert by_role["API server"] > 0 and by_role["server guard"] < 5, (label, by_role)


def test_report_shows_who_is_busy(real_run):
    rows = cpu_rows(RunResults.model_validate(real_run.run))
    assert {r[2].split(" (")[0] for r in rows} >= {"client", "engine core"}
    p = run_cli("report", str(real_run.dir))
    assert p.returncode == 0, p.stderr
    assert "## Who is busy: CPU per process" in p.stdout and "| vllm | c2 | client (loop thread" in p.stdout
    assert ("no GPU telemetry" in p.stdout) is not NO_NVIDIA_HERE
    assert ("GPUs (NVML)" in p.stdout) is not NO_NVIDIA_HERE
