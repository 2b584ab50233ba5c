"""backends/telemetry.py + compare/analysis/bottleneck.py on real processes: a busy-looping child
named like vLLM's API server is flagged, an idle one named like its engine core is not, a client
whose own event-loop thread spins is flagged as the bottleneck, and the GPU path says why it
has nothing where NVML cannot run (the NVML path itself needs a GPU: python -m backends.telemetry)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from backends.gpu_telemetry import NvmlSampler, _integrate, _visible
from backends.telemetry import LevelTelemetry, role_of
from compare.analysis.bottleneck import console_line, level_flags
from core.hardware import nvidia_gpus
from core.results import LevelSummary
from tests.conftest import ROOT

PY = str(ROOT / ".venv" / "bin" / "python")


def _saturate() -> None:
    # the machine is shared by parallel tests (and their engines): real-time scheduling lets a
    # busy process really sit at a core while it is sampled (root only; else the default priority)
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except PermissionError:
        pass


def _summary(tel: dict, lag_ms: float = 0.0, lagged: bool = False) -> LevelSummary:
    return LevelSummary.model_validate({
        "requests": 1, "ok": 1, "wall_s": tel["wall_s"], "output_tokens": 1, "input_tokens": 1,
        "output_tok_s": 1.0, "req_s": 1.0, "loop_lag_ms": {"max": lag_ms}, "client_lagged": lagged,
        "telemetry": tel})


def test_busy_server_child_is_flagged_idle_one_is_not():
    # bounded: it ends by itself even if this test dies
    spin = "import time\nt = time.time()\nwhile time.time() - t < 8: pass"
    busy = subprocess.Popen([sys.executable, "-c", spin, "VLLM::APIServer"], preexec_fn=_saturate)
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "VLLM::EngineCore"])
    try:
        time.sleep(1.0)  # both started (interpreter start-up is CPU work of its own)
        with LevelTelemetry(interval_s=0.2) as tel:
            time.sleep(2.5)
        rec = tel.summary(output_tokens=10)
    finally:
        for p in (busy, idle):
            p.kill()
            p.wait()
    procs = {p["pid"]: p for p in rec["processes"]}
    api, core = procs[busy.pid], procs[idle.pid]
    assert api["role"] == "API server" and core["role"] == "engine core"
    assert 80 <= api["mean_pct"] <= 100 * os.cpu_count() and api["threads"] == 1, api
    assert api["busy_frac"] >= 0.5 and core["busy_frac"] == 0 and core["mean_pct"] < 20, rec
    assert rec["processes"][0]["role"] == "client" and rec["samples"] >= 8
    s = _summary(rec)
    flags = level_flags(s)
    assert [f.kind for f in flags if f.kind != "oversubscribed"] == ["api_cpu"], flags
    assert "API server CPU-bound: tokenizer/detokenizer is the bottleneck" in console_line(s)


_SPIN = """
import json, time
from backends.telemetry import LevelTelemetry
with LevelTelemetry(interval_s=0.2) as tel:
    t = time.perf_counter()
    while time.perf_counter() - t < 2.5:
        pass
print(json.dumps(tel.summary()))
"""


def test_client_spinning_its_loop_thread_is_the_bottleneck():
    out = subprocess.run([PY, "-c", _SPIN], cwd=ROOT, capture_output=True, text=True, timeout=60,
                         preexec_fn=_saturate)
    assert out.returncode == 0, out.stderr[-2000:]
    rec = json.loads(out.stdout)
    client = rec["processes"][0]
    assert client["role"] == "client" and client["loop_thread_mean_pct"] >= 80, client
    s = _summary(rec, lag_ms=120.0, lagged=True)
    assert [f.kind for f in level_flags(s)] == ["client_cpu"]
    assert "client CPU-bound: its event loop at" in console_line(s) and "loop lag max 120 ms" in console_line(s)


def test_an_idle_level_flags_nothing():
    with LevelTelemetry(interval_s=0.1) as tel:
        time.sleep(0.6)
    s = _summary(tel.summary())
    assert s.telemetry.processes[0].role == "client" and s.telemetry.processes[0].mean_pct < 50
    assert console_line(s) is None


def test_gpu_telemetry_matches_the_machine():
    pytest.importorskip("pynvml")  # nvidia-ml-py: in the test extra
    nv = NvmlSampler()
    assert nv.available == bool(nvidia_gpus()), nv.note
    with LevelTelemetry(interval_s=0.1) as tel:
        time.sleep(0.3)
    rec = tel.summary(output_tokens=100)
    if nv.available:
        assert rec["gpu"]["devices"] and rec["gpu"]["energy_j"] >= 0 and "gpu_note" not in rec
    else:  # this machine: no GPU, so one line says why and there is no GPU record
        assert "gpu" not in rec and rec["gpu_note"].startswith("no GPU telemetry: NVML"), rec
    nv.close()


def test_without_nvidia_ml_py_the_run_says_so():
    code = ("import sys; sys.modules['pynvml'] = None\n"
            "from backends.gpu_telemetry import NvmlSampler; s = NvmlSampler(); print(s.available, s.note)")
    out = subprocess.run([PY, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == ("False no GPU telemetry: nvidia-ml-py is not installed "
                                  "(pip install nvidia-ml-py)"), out.stderr


def test_cuda_visible_devices_and_energy_integration():
    uuids = ["GPU-aaaa-1", "GPU-bbbb-2", "GPU-bbbc-3"]
    assert _visible(None, 3, uuids.__getitem__) == [0, 1, 2]
    assert _visible("2,0", 3, uuids.__getitem__) == [2, 0]
    assert _visible("GPU-aaaa,GPU-bbbb-2,7", 3, uuids.__getitem__) == [0, 1]  # unknown index dropped
    assert _visible("GPU-bbb", 3, uuids.__getitem__) == []  # ambiguous prefix: CUDA rejects it too
    assert _integrate([(0.0, 100.0), (1.0, 300.0), (3.0, 300.0)]) == pytest.approx(200.0 + 600.0)


def test_roles_from_command_lines_and_titles():
    assert role_of("python -m backends.server_process --guard python -m vllm.entrypoints.openai.api_server", "p") \
        == "server guard"
    assert role_of("python -m vllm.entrypoints.openai.api_server --model m", "python") == "API server"
    assert role_of("VLLM::EngineCore", "VLLM::EngineCor") == "engine core"
    assert role_of("python -m backends.openvino.engine", "python") == "engine process"
    assert role_of("sleep 5", "sleep") == "sleep"
    # a server the tool launched under its guard is the engine itself (llama-server has no role of
    # its own): its saturation is the engine's (compare/analysis/bottleneck.py)
    guard = "python -m backends.server_process --guard /x/llama-server --model m.gguf"
    assert role_of("/x/llama-server --model m.gguf --port 1", "llama-server", guard) == "engine server"
    assert role_of("python -m vllm.entrypoints.openai.api_server", "python", guard) == "API server"
