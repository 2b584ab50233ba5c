"""Golden tests: the framework-neutral spec -> each framework's native config (pure, no I/O)."""
import pytest
from pydantic import ValidationError

from adapters.hf import hf_model_kwargs
from adapters.spec import ServingSpec, UnsupportedSpecError
from adapters.target import Target
from adapters.vllm import vllm_engine_args, vllm_server_argv


def full_spec(**kw):
    base = dict(model="/m", dtype="bfloat16", max_model_len=4096, max_num_seqs=32,
                max_num_batched_tokens=8192, block_size=16, chunked_prefill=True, prefix_caching=False,
                gpu_memory_utilization=0.85, tensor_parallel=2, kv_cache_dtype="fp8", enforce_eager=True,
                seed=7, native={"vllm": {"swap_space": 0}})
    base.update(kw)
    return ServingSpec(**base)


def test_vllm_engine_args_golden():
    assert vllm_engine_args(full_spec()) == {
        "model": "/m", "seed": 7, "dtype": "bfloat16", "max_model_len": 4096, "max_num_seqs": 32,
        "max_num_batched_tokens": 8192, "block_size": 16, "enable_chunked_prefill": True,
        "enable_prefix_caching": False, "gpu_memory_utilization": 0.85, "enforce_eager": True,
        "tensor_parallel_size": 2, "kv_cache_dtype": "fp8", "swap_space": 0,
    }


def test_vllm_defaults_are_left_to_vllm():
    assert vllm_engine_args(ServingSpec(model="/m")) == {"model": "/m", "seed": 0}


def test_vllm_online_fp8_and_checkpoint_schemes():
    # online FP8 differs per device: per-tensor "fp8" on GPUs; per-channel on CPUs (fp8 needs AMX there)
    spec = ServingSpec(model="/m", quantization="w8a8-fp8")
    assert vllm_engine_args(spec, Target.unprobed("/m", "cuda"))["quantization"] == "fp8"
    assert vllm_engine_args(spec, Target.unprobed("/m", "cpu"))["quantization"] == "fp8_per_channel"
    # pre-quantized checkpoints: vLLM detects the method from the checkpoint's config
    assert "quantization" not in vllm_engine_args(ServingSpec(model="/m", quantization="w8a8-int8"))


def test_vllm_server_argv_golden():
    argv = vllm_server_argv(full_spec(), "127.0.0.1", 8011)
    assert argv == [
        "--model", "/m", "--host", "127.0.0.1", "--port", "8011", "--seed", "7", "--dtype", "bfloat16",
        "--max-model-len", "4096", "--max-num-seqs", "32", "--max-num-batched-tokens", "8192",
        "--block-size", "16", "--enable-chunked-prefill", "--no-enable-prefix-caching",
        "--gpu-memory-utilization", "0.85", "--enforce-eager", "--tensor-parallel-size", "2",
        "--kv-cache-dtype", "fp8", "--swap-space", "0",
    ]


def test_hf_reference_golden_and_not_applicable_knobs():
    cfg = hf_model_kwargs(ServingSpec(model="/m", dtype="float32", max_model_len=512, max_num_seqs=8,
                                      kv_cache_memory_bytes=1 << 26))
    assert cfg == {
        "model": "/m", "tokenizer": "/m", "from_pretrained": {"dtype": "float32"}, "max_model_len": 512,
        "seed": 0, "batching": "one request at a time (no continuous batching)",
        "not_applicable": {"max_num_seqs": 8, "kv_cache_memory_bytes": 1 << 26},
    }


@pytest.mark.parametrize("kw, option", [
    ({"quantization": "w4a16-awq"}, "quantization=w4a16-awq"),
    ({"kv_cache_dtype": "fp8"}, "kv_cache_dtype=fp8"),
    ({"tensor_parallel": 2}, "tensor_parallel=2"),
    ({"load_format": "dummy"}, "load_format=dummy"),
])
def test_hf_rejects_what_changes_outputs(kw, option):
    with pytest.raises(UnsupportedSpecError) as e:
        hf_model_kwargs(ServingSpec(model="/m", **kw))
    assert option in str(e.value) and "nearest supported" in str(e.value)


def test_spec_is_frozen_and_forbids_unknown_fields():
    s = ServingSpec(model="/m")
    with pytest.raises(ValidationError):
        s.max_num_seqs = 3  # type: ignore[misc]
    with pytest.raises(ValidationError):
        ServingSpec(model="/m", max_num_seq=3)  # typo must not pass silently
    with pytest.raises(ValidationError):
        ServingSpec(model="/m", max_num_seqs=0)
