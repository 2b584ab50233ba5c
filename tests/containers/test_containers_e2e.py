"""Container-backed backends end to end, through `compare run` as a user runs it, on the tiny model:
the real vLLM OpenAI server in llm-compare/vllm-cpu, and the tgi backend pointed at the locally
built TGI-protocol TEST DOUBLE image (TGI's wire protocol on the real vLLM engine; not TGI).

Images are built once by scripts/setup.d/20-docker.sh, never here. Each test starts one engine
(eager mode: torch.compile would cost minutes on CPU).
"""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from core.records import RequestRecord
from tests.conftest import ROOT, VENV_BIN, run_cli
from tests.containers.test_containers import _ours, docker_client, require_image  # noqa: F401  (fixture)

pytestmark = [pytest.mark.docker, pytest.mark.engine]
VLLM_IMAGE = "llm-compare/vllm-cpu:0.32.0"
TGI_DOUBLE = "llm-compare/tgi-double:0.32.0"
# vLLM's sampler torch.compiles its logprob gather on the first request that asks for logprobs: in a
# fresh container (no inductor cache) ~15 s of CPU that nothing here is about (the eager gather is
# the same computation)
EAGER_ENV = "TORCH_COMPILE_DISABLE=1"


def _spec_args(model: Path) -> list[str]:
    # the container's vLLM runs its model worker inside the engine-core process (tests/conftest.py
    # does the same for the host's engines): one process, ~10 s of imports, fewer per start
    return ["--model", str(model), "--max-model-len", "512", "--kv-cache-memory-bytes", str(64 * 2**20),
            "--native", f"vllm-container.env=VLLM_ENABLE_V1_MULTIPROCESSING=0,{EAGER_ENV}"]


def _rid(test: str) -> str:
    """A run id per test: the containers' llm-compare.run-id label (LLM_COMPARE_RUN_ID)."""
    return f"e2e-{test}-{os.getpid()}"


def _records(run_dir: Path) -> list[RequestRecord]:
    p = run_dir / "requests.jsonl"
    if not p.exists():
        return []
    # a line may be half written while the run is going: only complete lines count
    return [RequestRecord.from_json(json.loads(x)) for x in p.read_text().split("\n")[:-1] if x.strip()]


def test_tgi_backend_on_the_tgi_protocol_double_image(docker_client, tiny_model, tmp_path):
    require_image(docker_client, TGI_DOUBLE)
    # no KV byte budget: TGI 3.3 sizes its KV cache from memory (--cuda-memory-fraction), and so
    # does not take one; PREFIX_CACHING reaches the launcher through the container's environment
    spec = [a for a in _spec_args(tiny_model) if a not in ("--kv-cache-memory-bytes", str(64 * 2**20))]
    r = run_cli("run", "--backends", "tgi", *spec, "--prefix-caching", "false", "--native", f"tgi.image={TGI_DOUBLE}",
                "--native", "tgi.gpus=none", "--native", "tgi.--max-concurrent-requests=64",
                "--native", f"tgi.env={EAGER_ENV}",
                "--num-requests", "6", "--input-len", "32", "--output-len", "8", "--concurrency", "2",
                "--warmup", "1", "--out", str(tmp_path), "--run-id", "tgi", "--format", "json", timeout=900,
                env={"LLM_COMPARE_RUN_ID": _rid("tgi")})
    assert r.returncode == 0, r.stderr[-3000:]
    run = json.loads((tmp_path / "tgi" / "run.json").read_text())
    b = run["backends"]["tgi"]
    assert run["status"] == "complete" and b["status"] == "complete"
    assert b["capabilities"]["forced_output_length"] is False
    assert any("maintenance mode" in n for n in b["capabilities"]["notes"])
    recs = _records(tmp_path / "tgi")
    assert len(recs) == 6 and all(x.ok for x in recs)
    # no ignore_eos in TGI: up to max_new_tokens, counted from the streamed token ids
    assert all(1 <= x.output_tokens <= 8 for x in recs)
    nc = b["describe"]["native_config"]
    assert nc["launcher_argv"][:3] == ["text-generation-launcher", "--model-id", f"/models/{tiny_model.name}"]
    assert "--max-concurrent-requests" in nc["launcher_argv"]
    # /info read after start is the resolved config: what the server took from our launcher flags
    info = nc["resolved"]
    assert info["max_total_tokens"] == 512 and info["max_input_tokens"] == 511
    assert info["max_concurrent_requests"] == 64
    assert "test double" in info["version"]  # the double says what it is
    logs = b["describe"]["extra"]["container"]["logs_tail"]
    assert "tgi-double:" in logs and "PREFIX_CACHING=0" in logs  # the environment round trip
    assert "model_dtype" not in info and info["max_batch_total_tokens"] > 0  # 3.3's /info + the KV gauge
    assert _ours(docker_client, run_id=_rid("tgi")) == []


def test_server_exiting_during_start_reports_its_last_log_lines(docker_client, tiny_model, tmp_path):
    require_image(docker_client, VLLM_IMAGE)
    r = run_cli("run", "--backends", "vllm-container", *_spec_args(tiny_model), "--native", "vllm.no_such_flag=1",
                "--num-requests", "2", "--out", str(tmp_path), "--run-id", "x", timeout=600,
                env={"LLM_COMPARE_RUN_ID": _rid("x")})
    assert r.returncode == 1, r.stderr[-3000:]  # the run measured nothing: partial, not a user error
    b = json.loads((tmp_path / "x" / "run.json").read_text())["backends"]["vllm-container"]
    assert b["status"] == "failed"
    assert "exited with code" in b["error"] and "--no-such-flag" in b["error"] and "\n" not in b["error"]
    assert _ours(docker_client, run_id=_rid("x")) == []


def test_vllm_container_end_to_end_then_killed_mid_run(docker_client, tiny_model, tmp_path):
    """ONE container start: level c2 runs to the end (what a user's run measures and records), then
    the container is killed in level c1: the measured part is kept and nothing is left behind."""
    require_image(docker_client, VLLM_IMAGE)
    run_dir = tmp_path / "k"
    n = 16  # the killed level must still be running when the kill lands (c1: 16 x 32 tokens, ~14 to go)
    p = subprocess.Popen(
        [str(VENV_BIN / "compare"), "run", "--backends", "vllm-container", *_spec_args(tiny_model),
         "--dtype", "float32", "--enforce-eager", "true", "--num-requests", str(n), "--input-len", "16",
         "--output-len", "32", "--concurrency", "2,1", "--warmup", "1", "--out", str(tmp_path), "--run-id", "k"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "LLM_COMPARE_RUN_ID": _rid("k")})
    try:
        deadline = time.monotonic() + 900
        while len([x for x in _records(run_dir) if x.level == "c1"]) < 2:
            assert p.poll() is None, p.stdout.read()[-3000:]
            assert time.monotonic() < deadline, "no request of level c1 finished in time"
            time.sleep(0.2)
        mine = _ours(docker_client, backend="vllm-container", owner_pid=p.pid)
        assert len(mine) == 1
        mine[0].kill()  # the engine dies under the benchmark
        out, _ = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 1, out[-3000:]
    run = json.loads((run_dir / "run.json").read_text())
    b = run["backends"]["vllm-container"]
    assert run["status"] == "partial" and b["status"] == "failed"
    assert "died" in b["error"] and "exit code 137" in b["error"]
    recs = _records(run_dir)
    # level c2 ran to the end through the OpenAI server in the container
    c2 = [x for x in recs if x.level == "c2"]
    assert len(c2) == n and all(x.ok for x in c2)
    assert b["levels"]["c2"]["ok"] == n and "aborted" not in b["levels"]["c2"]
    # forced output length through the OpenAI server (ignore_eos), tokens counted from streamed ids
    assert all(x.output_tokens == 32 for x in c2)
    d = b["describe"]
    assert d["native_config"]["image"] == VLLM_IMAGE
    assert d["native_config"]["server_argv"][:2] == ["--model", f"/models/{tiny_model.name}"]
    assert "--enforce-eager" in d["native_config"]["server_argv"]
    c = d["extra"]["container"]
    assert c["port"].startswith("127.0.0.1:") and c["labels"]["llm-compare.backend"] == "vllm-container"
    assert "Application startup complete" in c["logs_tail"]  # the server's log, captured into run.json
    assert d["version"].startswith("0.32")
    assert c["labels"]["llm-compare.run-id"] == _rid("k")
    # native env reached the container
    assert c["settings"]["env"] == {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "TORCH_COMPILE_DISABLE": "1"}
    assert "-e VLLM_ENABLE_V1_MULTIPROCESSING=0" in c["settings"]["docker_run"]
    # level c1: what was measured before the kill is kept
    c1 = [x for x in recs if x.level == "c1"]
    ok = [x for x in c1 if x.ok]
    assert len(ok) >= 2 and all(x.output_tokens == 32 for x in ok)
    assert any(x.error_kind == "engine_dead" for x in c1 if not x.ok)
    assert len(c1) < n  # the level stopped instead of failing every remaining request
    assert _ours(docker_client, owner_pid=p.pid) == []  # no orphan container
    assert _ours(docker_client, run_id=_rid("k")) == []
    import psutil

    watchdogs = [q for q in psutil.process_iter(["cmdline"])
                 if "containers.watchdog" in (q.info["cmdline"] or []) and str(p.pid) in (q.info["cmdline"] or [])]
    assert watchdogs == []  # nor its watchdog process
