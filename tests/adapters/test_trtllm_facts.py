"""The TensorRT-LLM plan held to the per-release fact sheets (adapters/facts/trtllm-*.yaml): every
flag, YAML key and value it emits exists in that release, the defaults it relies on are upstream's,
and the fixes each sheet records show in `compare plan` output."""
import json

import pytest

from adapters.spec import ServingSpec
from adapters.trtllm import trtllm_plan
from adapters.trtllm_facts import facts_for, modelopt_ptq_script, sheets
from backends.http.openai import COMPLETIONS
from backends.http_backends import http_capabilities
from backends.trtllm import release_capabilities
from tests.conftest import cli

RELEASES = ("1.0.0", "1.1.0", "1.2.0")
HOPPER = "9.0"
SPECS = {
    "plain": {},
    "every-kv-option": dict(gpu_memory_utilization=0.8, prefix_caching=True, chunked_prefill=True,
                            max_num_seqs=32, max_num_batched_tokens=4096, max_model_len=2048, enforce_eager=True,
                            kv_cache_dtype="fp8", tensor_parallel=2, dtype="bfloat16"),
    "fp8": dict(quantization="w8a8-fp8", gpu_memory_utilization=0.9),
    "dummy-weights": dict(load_format="dummy"),
}


def _flags(argv):
    return [a for a in argv if a.startswith("--")]


def test_a_sheet_for_every_final_release_the_tool_claims_as_pytorch_default():
    assert sheets() == ["1.0", "1.1", "1.2.0"]
    assert facts_for("1.2.0").release == "1.2.0" and facts_for("1.1.3").release == "1.1"
    assert facts_for("1.3.0rc20") is None and facts_for("0.21.0") is None


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("flow", ["pytorch", "engine"])
@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_flag_and_yaml_key_the_plan_emits_exists_in_that_release(release, flow, name):
    kw = dict(SPECS[name])
    if flow == "engine" and kw.get("load_format") == "dummy":
        pytest.skip("the engine flow refuses load_format (covered in test_trtllm_adapter)")
    p = trtllm_plan(ServingSpec(model="/m", native={"trtllm": {"version": release, "flow": flow}}, **kw),
                    compute_capability=HOPPER)
    f = facts_for(release)
    assert set(_flags(p.serve_argv)) <= f.serve_options, set(_flags(p.serve_argv)) - f.serve_options
    assert set(p.llm_args) <= set(f.llm_args), set(p.llm_args) - set(f.llm_args)
    kv = p.llm_args.get("kv_cache_config") or {}
    assert set(kv) <= set(f.kv_cache_config), set(kv) - set(f.kv_cache_config)
    # one place for KV settings: a YAML kv_cache_config replaces the command line's upstream
    if kv:
        assert "--kv_cache_free_gpu_memory_fraction" not in p.serve_argv
    if "free_gpu_memory_fraction" in kv:
        assert 0 < kv["free_gpu_memory_fraction"] <= 1
    if "dtype" in kv:
        assert kv["dtype"] in ("fp8", "auto")


def test_defaults_the_plan_relies_on_are_upstreams():
    for release in RELEASES:
        f = facts_for(release)
        # why the plan sets enable_iter_perf_stats, and why the YAML must repeat the KV fraction
        assert f.llm_args["enable_iter_perf_stats"] is False and f.llm_args["return_perf_metrics"] is False
        assert f.kv_cache_config["free_gpu_memory_fraction"] == 0.9
        # why the 1.x engine flow passes --backend tensorrt
        assert f.raw["trtllm_serve"]["defaults"]["--backend"] == "pytorch"
        assert ("--config" in f.serve_options) == (release == "1.2.0")


def test_plan_turns_on_iteration_stats_so_metrics_is_not_empty():
    p = cli("plan", "--backends", "trtllm", "--format", "json")
    assert p.returncode == 0, p.stderr
    t = json.loads(p.stdout)["backends"]["trtllm"]
    assert t["llm_args_yaml"]["enable_iter_perf_stats"] is True
    assert t["serve"][-2:] == ["--config", "/config/llm_args.yaml"]
    assert "enable_iter_perf_stats" in t["facts"]["metrics"]["/metrics"]


def test_engine_flow_1x_keeps_the_memory_fraction_next_to_block_reuse():
    p = cli("plan", "--backends", "trtllm", "--native", "trtllm.version=1.1.0", "--native", "trtllm.flow=engine",
                "--gpu-memory-utilization", "0.6", "--prefix-caching", "true", "--format", "json")
    assert p.returncode == 0, p.stderr
    t = json.loads(p.stdout)["backends"]["trtllm"]
    assert t["llm_args_yaml"]["kv_cache_config"] == {"free_gpu_memory_fraction": 0.6, "enable_block_reuse": True}
    assert "--kv_cache_free_gpu_memory_fraction" not in t["serve"]
    assert t["spec_options"]["gpu_memory_utilization"]["how"] == "LlmArgs YAML kv_cache_config.free_gpu_memory_fraction"


def test_engine_flow_0x_still_takes_the_fraction_on_the_command_line():
    p = trtllm_plan(ServingSpec(model="/m", gpu_memory_utilization=0.6, native={"trtllm": {"version": "0.21.0"}}))
    assert p.llm_args == {} and p.serve_argv[-2:] == ("--kv_cache_free_gpu_memory_fraction", "0.6")


@pytest.mark.parametrize("release,modelopt,script", [
    ("1.0.0", "0.33.0", "examples/llm_ptq/hf_ptq.py"),
    ("1.2.0", "0.37.0", "examples/llm_ptq/hf_ptq.py"),
])
def test_modelopt_script_follows_the_pinned_modelopt_version(release, modelopt, script, tiny_model):
    p = cli("plan", "--backends", "trtllm", "--model", str(tiny_model), "--quantization", "w8a8-fp8",
                "--native", f"trtllm.version={release}", "--native", "trtllm.compute_capability=9.0", "--format", "json")
    assert p.returncode == 0, p.stderr
    t = json.loads(p.stdout)["backends"]["trtllm"]
    assert t["quantize"][1] == f"/opt/Model-Optimizer/{script}"
    assert t["facts"]["modelopt_checkout"] == modelopt


def test_a_newer_modelopt_checkout_uses_examples_hf_ptq(tiny_model):
    assert modelopt_ptq_script("0.45.0") == "examples/llm_ptq/hf_ptq.py"
    assert modelopt_ptq_script("0.46.0") == modelopt_ptq_script("0.47.0") == "examples/hf_ptq/hf_ptq.py"
    p = cli("plan", "--backends", "trtllm", "--model", str(tiny_model), "--quantization", "w8a8-fp8",
                "--native", "trtllm.modelopt_version=0.46.0", "--native", "trtllm.compute_capability=9.0",
                "--format", "json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["backends"]["trtllm"]["quantize"][1] == "/opt/Model-Optimizer/examples/hf_ptq/hf_ptq.py"
    bad = cli("plan", "--backends", "trtllm", "--native", "trtllm.modelopt_version=next")
    assert bad.returncode == 2 and "not a Model-Optimizer version" in bad.stderr and "Traceback" not in bad.stderr


def test_plan_shows_what_upstream_does_with_each_spec_option():
    p = cli("plan", "--backends", "trtllm", "--max-num-seqs", "8", "--gpu-memory-utilization", "0.7",
                "--seed", "3", "--format", "json")
    assert p.returncode == 0, p.stderr
    opts = json.loads(p.stdout)["backends"]["trtllm"]["spec_options"]
    assert opts["max_num_seqs"] == {"value": 8, "status": "mapped", "how": "LlmArgs YAML max_batch_size"}
    assert "FREE after weights" in opts["gpu_memory_utilization"]["meaning"]
    assert opts["seed"]["status"] == "not_applicable" and "per request" in opts["seed"]["how"]


def test_logprobs_capability_per_release():
    caps = http_capabilities(COMPLETIONS)
    assert caps.logprobs is True  # what the plain completions protocol claims
    for release in RELEASES:
        assert release_capabilities(caps, release).logprobs is False
    unknown = release_capabilities(caps, "1.3.0rc27")
    assert unknown.logprobs is True and "no fact sheet" in unknown.notes[-1]


@pytest.mark.parametrize("release", RELEASES)
def test_each_sheet_names_the_script_its_modelopt_pin_has(release):
    f = facts_for(release)
    assert f.raw["modelopt"]["ptq_script"] == modelopt_ptq_script(f.modelopt_version)
    assert all(f.sources().values())
