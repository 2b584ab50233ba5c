"""Golden tests: ServingSpec + TensorRT-LLM release -> flow, quantize/build/serve argv, LlmArgs YAML.

TensorRT-LLM cannot run here; these pin every generated command to the flags read from its source
and docs at the release tags cited in adapters/trtllm.py.
"""
import pytest
import yaml

from adapters.spec import ServingSpec, UnsupportedSpecError
from adapters.trtllm import SCHEMES, trtllm_plan

HOPPER = "9.0"


def spec(native=None, **kw):
    base = dict(model="/m", dtype="bfloat16", max_model_len=4096, max_num_seqs=64, max_num_batched_tokens=8192,
                prefix_caching=True, gpu_memory_utilization=0.85)
    base.update(kw)
    return ServingSpec(**base, native={"trtllm": native or {}})


# ---------------------------------------------------------------- flow by version

@pytest.mark.parametrize("version,flow", [("0.18.0", "engine"), ("0.21.0", "engine"), ("1.0.0", "pytorch"),
                                          ("1.2.0", "pytorch"), ("1.3.0rc20", "pytorch"), ("1.4.0rc4", "pytorch")])
def test_default_flow_by_version(version, flow):
    p = trtllm_plan(spec({"version": version}, prefix_caching=None), compute_capability=HOPPER)
    assert (p.flow, p.image) == (flow, f"nvcr.io/nvidia/tensorrt-llm/release:{version}")


def test_version_from_image_tag_and_default():
    p = trtllm_plan(spec({"image": "nvcr.io/nvidia/tensorrt-llm/release:1.1.0"}))
    assert (p.version, p.flow) == ("1.1.0", "pytorch")
    assert trtllm_plan(spec()).version == "1.2.0"


def test_engine_flow_exists_until_1_3_0rc20_only():
    assert trtllm_plan(spec({"version": "1.3.0rc20", "flow": "engine"})).flow == "engine"
    with pytest.raises(UnsupportedSpecError, match="removed after 1.3.0rc20.*trtllm.flow=pytorch"):
        trtllm_plan(spec({"version": "1.3.0rc21", "flow": "engine"}))
    with pytest.raises(UnsupportedSpecError, match="experimental"):
        trtllm_plan(spec({"version": "0.21.0", "flow": "pytorch"}))
    with pytest.raises(UnsupportedSpecError, match="releases before 0.18.0"):
        trtllm_plan(spec({"version": "0.16.0"}))
    with pytest.raises(UnsupportedSpecError, match="not a TensorRT-LLM release"):
        trtllm_plan(spec({"version": "latest"}))


# ---------------------------------------------------------------- PyTorch flow goldens

def test_pytorch_unquantized_golden_1_2_uses_config():
    p = trtllm_plan(spec(tensor_parallel=2, chunked_prefill=True, enforce_eager=True), compute_capability=HOPPER,
                    gpu_name="NVIDIA H200")
    assert p.steps == ()
    assert p.llm_args == {
        "dtype": "bfloat16", "max_batch_size": 64, "max_num_tokens": 8192, "max_seq_len": 4096,
        "tensor_parallel_size": 2, "enable_chunked_prefill": True,
        "kv_cache_config": {"free_gpu_memory_fraction": 0.85, "enable_block_reuse": True},
        "cuda_graph_config": None, "enable_iter_perf_stats": True,
    }
    assert list(p.serve_argv) == ["trtllm-serve", "/model", "--host", "0.0.0.0", "--port", "8000",
                                  "--config", "/config/llm_args.yaml"]
    assert yaml.safe_dump(p.llm_args, sort_keys=False) == (
        "dtype: bfloat16\nmax_batch_size: 64\nmax_num_tokens: 8192\nmax_seq_len: 4096\n"
        "tensor_parallel_size: 2\nenable_chunked_prefill: true\nkv_cache_config:\n"
        "  free_gpu_memory_fraction: 0.85\n  enable_block_reuse: true\ncuda_graph_config: null\n"
        "enable_iter_perf_stats: true\n")


def test_pytorch_1_0_uses_extra_llm_api_options():
    p = trtllm_plan(spec({"version": "1.0.0"}))
    assert p.serve_argv[-2:] == ("--extra_llm_api_options", "/config/llm_args.yaml")


@pytest.mark.parametrize("quant,native,qformat,algo,cc", [
    ("w8a8-fp8", {}, "fp8", "FP8", "9.0"),
    ("w4a16-awq", {}, "int4_awq", "W4A16_AWQ", "8.0"),
    ("none", {"quant": "w4a8_awq"}, "w4a8_awq", "W4A8_AWQ", "8.9"),
    ("none", {"quant": "nvfp4"}, "nvfp4", "NVFP4", "10.0"),
])
def test_pytorch_modelopt_quantize_golden(quant, native, qformat, algo, cc):
    p = trtllm_plan(spec(native, quantization=quant, kv_cache_dtype="fp8", tensor_parallel=2), compute_capability=cc)
    (step,) = p.steps
    assert step.name == "quantize" and step.mounts_modelopt
    assert list(step.argv) == [
        "python3", "/opt/Model-Optimizer/examples/llm_ptq/hf_ptq.py", "--pyt_ckpt_path", "/model",
        "--qformat", qformat, "--kv_cache_qformat", "fp8", "--export_path", "/work/quantized",
        "--export_fmt", "hf", "--inference_tensor_parallel", "2"]
    assert p.quant == algo and p.serve_model == "/work/quantized"
    assert p.serve_argv[1] == "/work/quantized"
    assert p.llm_args["kv_cache_config"]["dtype"] == "fp8"


def test_pytorch_quantize_kv_none_calib_options():
    p = trtllm_plan(spec({"calib_size": 64, "calib_dataset": "/data/calib"}, quantization="w8a8-fp8"))
    assert list(p.steps[0].argv[4:]) == ["--qformat", "fp8", "--kv_cache_qformat", "none", "--export_path",
                                         "/work/quantized", "--export_fmt", "hf", "--dataset", "/data/calib",
                                         "--calib_size", "64"]


def test_pytorch_prequantized_checkpoint_skips_quantize():
    p = trtllm_plan(spec(quantization="w4a16-gptq"), compute_capability="8.0", checkpoint_quant="W4A16_GPTQ")
    assert p.steps == () and p.serve_model == "/model" and p.quant == "W4A16_GPTQ"
    with pytest.raises(UnsupportedSpecError, match="ModelOpt does not produce GPTQ"):
        trtllm_plan(spec(quantization="w4a16-gptq"), compute_capability="8.0")
    with pytest.raises(UnsupportedSpecError, match="already quantized as FP8"):
        trtllm_plan(spec(), checkpoint_quant="FP8")


def test_pytorch_block_size_and_kv_bytes_need_1_3():
    p = trtllm_plan(spec({"version": "1.3.0rc27"}, block_size=64, kv_cache_memory_bytes=2**30))
    assert p.llm_args["kv_cache_config"] == {"free_gpu_memory_fraction": 0.85, "enable_block_reuse": True,
                                             "tokens_per_block": 64, "max_gpu_total_bytes": 2**30}
    with pytest.raises(UnsupportedSpecError, match="block_size with 1.2.0"):
        trtllm_plan(spec(block_size=64))


def test_pytorch_native_llm_args_merged_and_tokenizer_and_dummy():
    p = trtllm_plan(spec({"llm_args": {"print_iter_log": True}}, tokenizer="/tok", load_format="dummy"))
    assert p.llm_args["print_iter_log"] is True and p.llm_args["load_format"] == "dummy"
    assert p.serve_argv[:4] == ("trtllm-serve", "/model", "--tokenizer", "/tokenizer")


# ---------------------------------------------------------------- engine flow goldens

@pytest.mark.parametrize("quant,native,qformat,cc", [
    ("none", {}, "full_prec", "8.0"), ("w8a8-fp8", {}, "fp8", "9.0"), ("w4a16-awq", {}, "int4_awq", "8.0"),
    ("w8a8-int8", {}, "int8_sq", "8.0"), ("w8a16-int8", {}, "int8_wo", "7.0"),
    ("none", {"quant": "w4a8_awq"}, "w4a8_awq", "8.9"), ("none", {"quant": "nvfp4"}, "nvfp4", "10.0"),
])
def test_engine_quantize_golden(quant, native, qformat, cc):
    p = trtllm_plan(spec({"version": "0.21.0", **native}, quantization=quant, prefix_caching=None, tensor_parallel=2),
                    compute_capability=cc)
    q, b = p.steps
    assert list(q.argv) == ["python3", "/app/tensorrt_llm/examples/quantization/quantize.py", "--model_dir", "/model",
                            "--output_dir", "/work/checkpoint", "--qformat", qformat, "--dtype", "bfloat16",
                            "--tp_size", "2"]
    assert list(b.argv) == ["trtllm-build", "--checkpoint_dir", "/work/checkpoint", "--output_dir", "/work/engine",
                            "--max_batch_size", "64", "--max_num_tokens", "8192", "--max_seq_len", "4096",
                            "--max_input_len", "4096", "--workers", "2"]


def test_engine_full_golden_1_x_with_kv_fp8_reuse_and_serve():
    p = trtllm_plan(spec({"version": "1.1.0", "flow": "engine", "calib_size": 128,
                          "build_args": {"gemm_plugin": "auto", "strip_plan": True}},
                         quantization="w8a8-fp8", kv_cache_dtype="fp8", block_size=64, chunked_prefill=True),
                    compute_capability=HOPPER)
    q, b = p.steps
    assert list(q.argv) == ["python3", "/app/tensorrt_llm/examples/quantization/quantize.py", "--model_dir", "/model",
                            "--output_dir", "/work/checkpoint", "--qformat", "fp8", "--dtype", "bfloat16",
                            "--kv_cache_dtype", "fp8", "--calib_size", "128"]
    assert list(b.argv) == ["trtllm-build", "--checkpoint_dir", "/work/checkpoint", "--output_dir", "/work/engine",
                            "--max_batch_size", "64", "--max_num_tokens", "8192", "--max_seq_len", "4096",
                            "--max_input_len", "4096", "--tokens_per_block", "64", "--use_paged_context_fmha",
                            "enable", "--gemm_plugin", "auto", "--strip_plan"]
    # every KV setting in the YAML: its kv_cache_config replaces the command line's upstream
    assert p.llm_args == {"kv_cache_config": {"free_gpu_memory_fraction": 0.85, "enable_block_reuse": True},
                          "enable_chunked_prefill": True}
    assert list(p.serve_argv) == [
        "trtllm-serve", "/work/engine", "--tokenizer", "/model", "--backend", "tensorrt", "--host", "0.0.0.0",
        "--port", "8000", "--max_batch_size", "64", "--max_num_tokens", "8192",
        "--extra_llm_api_options", "/config/llm_args.yaml"]


def test_engine_0_x_serve_has_no_backend_flag_nor_yaml():
    p = trtllm_plan(spec({"version": "0.18.0"}, prefix_caching=None, tensor_parallel=2))
    assert list(p.serve_argv) == [
        "trtllm-serve", "/work/engine", "--tokenizer", "/model", "--host", "0.0.0.0", "--port", "8000",
        "--max_batch_size", "64", "--max_num_tokens", "8192", "--kv_cache_free_gpu_memory_fraction", "0.85",
        "--tp_size", "2"]
    with pytest.raises(UnsupportedSpecError, match="prefix_caching with 0.18.0"):
        trtllm_plan(spec({"version": "0.18.0"}))


def test_engine_rejects_options_it_has_no_flag_for():
    with pytest.raises(UnsupportedSpecError, match="GPTQ needs the per-model convert_checkpoint.py"):
        trtllm_plan(spec({"version": "0.21.0"}, quantization="w4a16-gptq", prefix_caching=None))
    with pytest.raises(UnsupportedSpecError, match="NVFP4 with 0.16"):
        from adapters.trtllm import check_quant, parse_version
        check_quant("NVFP4", "engine", parse_version("0.16.0"), None, None)
    with pytest.raises(UnsupportedSpecError, match="load_format in the engine flow"):
        trtllm_plan(spec({"version": "0.21.0"}, load_format="dummy", prefix_caching=None))
    p = trtllm_plan(spec({"version": "0.21.0"}, enforce_eager=True, prefix_caching=None))
    assert p.not_applicable == {"seed": 0, "enforce_eager": True}


# ---------------------------------------------------------------- quantization x GPU

@pytest.mark.parametrize("flow_native", [{"version": "1.2.0"}, {"version": "0.21.0"}])
@pytest.mark.parametrize("cc", ["8.0", "8.6", "7.5"])
def test_fp8_refused_on_gpus_without_fp8(flow_native, cc):
    with pytest.raises(UnsupportedSpecError, match="needs FP8 tensor cores"):
        trtllm_plan(spec(flow_native, quantization="w8a8-fp8", prefix_caching=None), compute_capability=cc)
    with pytest.raises(UnsupportedSpecError, match="needs FP8 tensor cores"):
        trtllm_plan(spec({**flow_native, "quant": "w4a8_awq"}, prefix_caching=None), compute_capability=cc)


def test_fp8_allowed_on_ada_hopper_blackwell_and_cc_from_native():
    for cc in ("8.9", "9.0", "10.0", "12.0"):
        assert trtllm_plan(spec(quantization="w8a8-fp8"), compute_capability=cc).quant == "FP8"
    # the native option wins over the detected GPU
    p = trtllm_plan(spec({"compute_capability": "sm_90"}, quantization="w8a8-fp8"), compute_capability="8.0")
    assert p.compute_capability == "9.0"


def test_pytorch_matrix_blackwell_and_missing_schemes():
    with pytest.raises(UnsupportedSpecError, match="up to below 10.0"):
        trtllm_plan(spec(quantization="w4a16-awq"), compute_capability="10.0")
    with pytest.raises(UnsupportedSpecError, match="runs on compute capability 10.0"):
        trtllm_plan(spec({"quant": "nvfp4"}), compute_capability=HOPPER)
    with pytest.raises(UnsupportedSpecError, match="W8A8_SQ_PER_CHANNEL in the pytorch flow"):
        trtllm_plan(spec(quantization="w8a8-int8"))
    with pytest.raises(UnsupportedSpecError, match="no scheme with this meaning"):
        trtllm_plan(spec(quantization="w4a16"))
    with pytest.raises(UnsupportedSpecError, match="unknown TensorRT-LLM quantization"):
        trtllm_plan(spec({"quant": "int3"}))


def test_unknown_gpu_is_a_note_not_a_guess():
    p = trtllm_plan(spec(quantization="w8a8-fp8"))
    assert any("compute capability unknown" in n for n in p.notes)


def test_kv_cache_dtype_rules():
    with pytest.raises(UnsupportedSpecError, match="E4M3"):
        trtllm_plan(spec(kv_cache_dtype="fp8_e5m2"))
    assert trtllm_plan(spec(kv_cache_dtype="fp8_e4m3"), compute_capability="8.0").llm_args["kv_cache_config"]["dtype"] == "fp8"
    with pytest.raises(UnsupportedSpecError, match="kv_cache_dtype=fp8 on sm_80"):
        trtllm_plan(spec({"version": "0.21.0"}, kv_cache_dtype="fp8", prefix_caching=None), compute_capability="8.0")


def test_unknown_native_key_is_refused_not_dropped():
    with pytest.raises(UnsupportedSpecError, match="native trtllm.max_beam_width.*trtllm.llm_args"):
        trtllm_plan(spec({"max_beam_width": 2}))


def test_every_scheme_is_covered_by_a_flow():
    for s in SCHEMES.values():
        assert s.engine_min_cc or s.pytorch_cc, s.algo


def test_cache_fields_change_with_what_decides_the_artifact():
    a = trtllm_plan(spec(quantization="w8a8-fp8"), compute_capability=HOPPER, gpu_name="H200").cache_fields()
    b = trtllm_plan(spec(quantization="w8a8-fp8", max_num_seqs=8), compute_capability=HOPPER, gpu_name="H200").cache_fields()
    c = trtllm_plan(spec(quantization="w4a16-awq"), compute_capability=HOPPER, gpu_name="H200").cache_fields()
    d = trtllm_plan(spec(quantization="w8a8-fp8"), compute_capability="8.9", gpu_name="L40S").cache_fields()
    assert a == b  # runtime batch limits do not change a quantized checkpoint
    assert a != c and a != d
    e1 = trtllm_plan(spec({"version": "0.21.0"}, prefix_caching=None)).cache_fields()
    e2 = trtllm_plan(spec({"version": "0.21.0"}, prefix_caching=None, max_num_seqs=8)).cache_fields()
    assert e1 != e2  # an engine is compiled for its max batch size
