"""`compare plan --backends trtllm`, bad input (exit 2, one line), `compare cache ls|rm`, `compare backends`."""
import json

import pytest
import yaml

from backends.models.engine_cache import EngineCache
from tests.conftest import cli, run_cli


def test_plan_prints_flow_commands_and_llm_args_yaml(tiny_model):
    p = cli("plan", "--backends", "trtllm", "--model", str(tiny_model), "--quantization", "w8a8-fp8",
                "--max-num-seqs", "16", "--prefix-caching", "true", "--native", "trtllm.version=1.2.0",
                "--native", "trtllm.compute_capability=9.0")
    assert p.returncode == 0, p.stderr
    t = yaml.safe_load(p.stdout)["backends"]["trtllm"]
    assert t["flow"] == "pytorch" and t["trtllm_version"] == "1.2.0" and t["build"] is None
    assert t["quantize"][1].endswith("hf_ptq.py") and "fp8" in t["quantize"]
    assert t["llm_args_yaml"] == {"max_batch_size": 16, "kv_cache_config": {"enable_block_reuse": True},
                                  "enable_iter_perf_stats": True}
    assert "max_batch_size: 16" in t["llm_args_yaml_text"]
    assert t["serve"][-2:] == ["--config", "/config/llm_args.yaml"]
    assert "never" in t["executed_here"]


def test_plan_engine_flow_for_an_old_release():
    p = cli("plan", "--backends", "trtllm", "--native", "trtllm.version=0.21.0", "--max-model-len", "2048",
                "--format", "json")
    assert p.returncode == 0, p.stderr
    t = json.loads(p.stdout)["backends"]["trtllm"]
    assert t["flow"] == "engine" and t["quantize"][-2:] == ["--qformat", "full_prec"]
    assert t["build"][:1] == ["trtllm-build"] and "--max_seq_len" in t["build"]
    assert t["image"] == "nvcr.io/nvidia/tensorrt-llm/release:0.21.0"


@pytest.mark.parametrize("args,needle", [
    (["--quantization", "w8a8-fp8", "--native", "trtllm.compute_capability=8.0"], "needs FP8 tensor cores"),
    (["--quantization", "w8a8-int8"], "W8A8_SQ_PER_CHANNEL in the pytorch flow"),
    (["--native", "trtllm.version=1.3.0rc22", "--native", "trtllm.flow=engine"], "removed after 1.3.0rc20"),
    (["--native", "trtllm.quant=int2"], "unknown TensorRT-LLM quantization"),
])
def test_unsupported_specs_exit_2_one_line(args, needle):
    p = cli("plan", "--backends", "trtllm", *args)
    assert p.returncode == 2 and needle in p.stderr, p.stderr
    assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr


def test_missing_checkpoint_files_exit_2(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    p = run_cli("run", "--backends", "trtllm", "--model", str(tmp_path), "--out", str(tmp_path / "r"))
    assert p.returncode == 2 and "no weight files" in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_cache_ls_and_rm_on_real_entries(tmp_path):
    cache = EngineCache(tmp_path / "c")
    for key in ("aaaa1111", "aaaa2222", "bbbb3333"):
        cache.get_or_build(key, {"model": "/m", "flow": "engine", "quant": "FP8", "version": "0.21.0",
                                 "gpu_name": "NVIDIA H100", "compute_capability": "9.0"},
                           lambda d: (d / "rank0.engine").write_bytes(b"x" * 2048))
    env_dir = ["--cache-dir", str(cache.root)]
    p = cli("cache", "ls", "--json", *env_dir)
    rows = json.loads(p.stdout)
    assert [r["key"] for r in rows] == ["aaaa1111", "aaaa2222", "bbbb3333"] and rows[0]["size_bytes"] >= 2048
    assert "aaaa1111" in cli("cache", "ls", *env_dir).stdout
    p = cli("cache", "rm", "aaaa", *env_dir)
    assert p.returncode == 2 and "matches 2 entries" in p.stderr
    assert cli("cache", "rm", "nope", *env_dir).returncode == 2
    p = cli("cache", "rm", "bbbb", *env_dir)
    assert p.returncode == 0 and [e.key for e in cache.entries()] == ["aaaa1111", "aaaa2222"]
    assert cli("cache", "rm", "--all", *env_dir).returncode == 0 and cache.entries() == []
    assert "is empty" in cli("cache", "ls", *env_dir).stdout


def test_backends_says_it_never_ran_here():
    p = cli("backends", "--json")
    rows = {r["name"].split("@")[0]: r for r in json.loads(p.stdout)}
    for name in ("trtllm", "trtllm-inproc"):
        assert any("NOT executed against TensorRT-LLM" in n for n in rows[name]["notes"]), rows[name]
    assert rows["trtllm-inproc"]["runnable_here"] is False
    assert "pypi.nvidia.com" in rows["trtllm-inproc"]["reason"]


def test_inproc_without_tensorrt_llm_is_one_line(tiny_model, tmp_path):
    p = run_cli("run", "--backends", "trtllm-inproc", "--model", str(tiny_model), "--num-requests", "1",
                "--gpu-memory-utilization", "0.5",
                "--out", str(tmp_path))
    assert p.returncode == 2 and "tensorrt_llm" in p.stderr and "Traceback" not in p.stderr, p.stderr
