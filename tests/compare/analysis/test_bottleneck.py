"""compare/analysis/bottleneck.py on telemetry records: which saturation is flagged, where it is
shown, and how the loop-lag caveat reads with it (the sampler itself: tests/backends/test_telemetry.py)."""
from __future__ import annotations

import json

from compare.analysis.bottleneck import console_line, gpu_rows, lag_explanations, level_flags
from compare.analysis.caveats import caveats
from core.results import LevelSummary
from core.results.models import GpuInfo
from tests.conftest import FIXTURES
from tests.synth import make_run, records

GPU = {"devices": [{"index": 0, "name": "NVIDIA H200", "samples": 20, "util_mean_pct": 41.0, "util_peak_pct": 100.0,
                    "mem_used_peak_mib": 1626.0, "power_mean_w": 285.0, "power_peak_w": 695.0,
                    "sm_clock_mean_mhz": 931.0, "energy_j": 1673.5, "energy_source": "counter"}],
       "wall_s": 5.0, "energy_j": 1673.5, "energy_source": "counter", "output_tok_per_j": 2.0}


def _proc(role, mean, busy, **kw):
    return {"role": role, "pid": 100 + len(role), "name": role, "samples": 20, "mean_pct": mean,
            "peak_pct": mean + 5, "threads": 4, "busy_frac": busy, **kw}


def _level(procs, machine=None, gpu=None, lag=0.0, lagged=False) -> dict:
    tel = {"interval_s": 0.25, "samples": 20, "wall_s": 5.0, "cpu_cores": 2, "machine_cpu_busy_pct": machine,
           "processes": procs}
    tel.update({"gpu": gpu} if gpu else {"gpu_note": "no GPU telemetry: NVML is not usable here"})
    return {"requests": 4, "ok": 4, "wall_s": 5.0, "output_tokens": 3347, "input_tokens": 4, "output_tok_s": 669.4,
            "req_s": 0.8, "loop_lag_ms": {"max": lag}, "client_lagged": lagged, "telemetry": tel}


CLIENT_IDLE = _proc("client", 8.0, 0.0, loop_thread_mean_pct=5.0, loop_thread_busy_frac=0.0)


def test_engine_core_on_a_gpu_is_shown_on_cpu_inference_it_is_expected():
    busy_core = [CLIENT_IDLE, _proc("engine core", 99.0, 0.9)]
    on_gpu = LevelSummary.model_validate(_level(busy_core, machine=20.0, gpu=GPU))
    assert [(f.kind, f.console) for f in level_flags(on_gpu)] == [("engine_cpu", True)]
    assert console_line(on_gpu).startswith("engine core CPU-bound (its CPU work holds the GPU back")
    on_cpu = LevelSummary.model_validate(_level(busy_core, machine=60.0))
    assert [(f.kind, f.console) for f in level_flags(on_cpu)] == [("engine_cpu", False)]
    assert console_line(on_cpu) is None


def test_a_launched_engine_server_saturated_on_a_gpu_is_flagged():
    # llama-server on the H200 at c64: 190% CPU, a thread busy 99% of the level, GPU busy 14%
    s = LevelSummary.model_validate(_level([CLIENT_IDLE, _proc("engine server", 190.0, 0.99)], machine=15.0,
                                           gpu={**GPU, "devices": [{**GPU["devices"][0], "util_mean_pct": 14.4}]}))
    assert [(f.kind, f.console) for f in level_flags(s)] == [("engine_cpu", True)]
    assert console_line(s).startswith("engine server CPU-bound (its CPU work holds the GPU back; GPU busy 14%")


def test_a_thread_busy_in_less_than_half_the_level_is_not_flagged():
    s = LevelSummary.model_validate(_level([CLIENT_IDLE, _proc("API server", 80.0, 0.4)], machine=50.0))
    assert level_flags(s) == []


def test_lagging_client_saturated_or_starved_reads_in_the_caveat():
    spun = _proc("client", 99.0, 0.95, loop_thread_mean_pct=97.0, loop_thread_busy_frac=0.95)
    run, _ = make_run({"a": [records("a", "c1", 0)], "b": [records("b", "c1", 0)]})
    run["backends"]["a"]["levels"]["c1"].update(_level([spun], machine=60.0, lag=90.0, lagged=True))
    run["backends"]["b"]["levels"]["c1"].update(_level([CLIENT_IDLE, _proc("engine core", 150.0, 0.2)],
                                                       machine=99.0, lag=300.0, lagged=True))
    from core.results import RunResults

    r = RunResults.model_validate(run)
    assert lag_explanations(r) == ("client's own work saturated its loop: a c1 (loop thread 97%); loop thread not "
                                   "saturated, the machine's CPU was oversubscribed: b c1")
    assert "(telemetry: client's own work saturated its loop: a c1" in caveats(r)[0]
    b = r.backends["b"].levels["c1"]
    assert [f.text for f in level_flags(b)] == ["client fell behind (loop lag max 300 ms), its thread at 5%: CPU oversubscribed "
                                                "(machine 99% busy, this run 1.6 of 2 cores)"]
    assert console_line(b) is None  # the caveat under the table says it, once
    run["backends"]["a"]["levels"]["c1"]["client_lagged"] = False
    assert lag_explanations(RunResults.model_validate(run)) == ("its loop thread was not saturated, the machine's "
                                                                "CPU was oversubscribed")


def test_gpu_rows_give_tokens_per_joule():
    run, _ = make_run({"a": [records("a", "c1", 0)]})
    run["backends"]["a"]["levels"]["c1"].update(_level([CLIENT_IDLE], gpu=GPU))
    from core.results import RunResults

    (row,) = gpu_rows(RunResults.model_validate(run))
    assert row[2] == "0 NVIDIA H200" and row[7] == "1674" and row[-2] == "669.4" and row[-1] == "2.000"


def test_h200_transformers_level_its_generation_thread_is_the_bottleneck():
    """A level measured on the H200 (compare run --backends hf, the tiny model, c1; 2026-12-01):
    our process at 102% of a core, busy in every sample, its event loop at 9%, the GPU 8% busy."""
    s = LevelSummary.model_validate(json.loads((FIXTURES / "telemetry_h200_hf_c1.json").read_text()))
    assert [(f.kind, f.console) for f in level_flags(s)] == [("inproc_cpu", True)]
    assert console_line(s) == ("in-process engine thread CPU-bound (a thread at >= 90% of a core in 100% of the "
                               "level; GPU busy 8%)")
    g = s.telemetry.gpu
    assert g.energy_source == "counter" and g.output_tok_per_j == round(s.output_tokens / g.energy_j, 4)


def test_a_measuring_process_holding_gpu_memory_beside_the_engine_is_flagged():
    """The per-level NVML process record: the engine holds most of the GPU; a measuring process
    with more than a CUDA context (a quality reference loaded beside the engine) is flagged."""
    from compare.analysis.bottleneck import gpu_process_rows
    from core.results import RunResults

    def gpu(measuring_mib):
        return {**GPU, "processes": [{"pid": 7, "role": "engine core", "mem_peak_mib": 118000.0},
                                     {"pid": 8, "role": "client", "mem_peak_mib": measuring_mib, "measuring": True}]}

    quiet = LevelSummary.model_validate(_level([CLIENT_IDLE], machine=20.0, gpu=gpu(520.0)))
    assert level_flags(quiet) == []
    loud = LevelSummary.model_validate(_level([CLIENT_IDLE], machine=20.0, gpu=gpu(26000.0)))
    assert [(f.kind, f.console) for f in level_flags(loud)] == [("measuring_gpu", True)]
    assert "the measuring process held 26000 MiB of GPU memory" in console_line(loud)
    run, _ = make_run({"a": [records("a", "c1", 0)]})
    run["backends"]["a"]["levels"]["c1"].update(_level([CLIENT_IDLE], machine=20.0, gpu=gpu(520.0)))
    rows = gpu_process_rows(RunResults.model_validate(run))
    assert rows == [["a", "c1", "engine core", "7", "118000"], ["a", "c1", "client (measuring)", "8", "520"]]


def test_no_gpu_telemetry_is_said_only_where_a_gpu_was_expected():
    from compare.analysis.bottleneck import gpu_expected, gpu_note
    from core.results import RunResults

    no_lib = "no GPU telemetry: NVML is not usable here (NVML Shared Library Not Found)"
    no_pkg = "no GPU telemetry: nvidia-ml-py is not installed (pip install nvidia-ml-py)"
    driver = "no GPU telemetry: NVML is not usable here (Driver Not Loaded)"
    h200 = [GpuInfo(name="NVIDIA H200", driver="570", memory="141 GiB", compute_cap="9.0")]
    # a CPU machine without any NVIDIA software, CPU engines: nothing to say
    assert not gpu_expected(no_lib, [], ["vllm", "transformers"]) and not gpu_expected(no_pkg, [], ["vllm"])
    # a GPU was found, a GPU-only engine ran, or NVML is there and failed: said
    assert gpu_expected(no_lib, h200, ["vllm"]) and gpu_expected(no_pkg, h200, ["vllm"])
    assert gpu_expected(no_lib, [], ["tensorrt-llm"])
    assert gpu_expected(driver, [], ["vllm"]) and gpu_expected("no GPU telemetry: NVML sees no GPU", [], ["vllm"])

    def run_with(note: str, gpus: list) -> RunResults:
        run, _ = make_run({"a": [records("a", "c1", 0)]})
        run["hardware"]["gpus"] = gpus
        run["backends"]["a"]["levels"]["c1"]["telemetry"] = {
            "interval_s": 0.25, "samples": 4, "wall_s": 1.0, "cpu_cores": 2, "processes": [], "gpu_note": note}
        return RunResults.model_validate(run)

    assert gpu_note(run_with(no_lib, [])) is None
    assert gpu_note(run_with(no_lib, h200)) == no_lib and gpu_note(run_with(driver, [])) == driver
