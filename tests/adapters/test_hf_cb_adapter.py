"""ServingSpec -> transformers continuous batching plan (pure): every field mapped or refused."""
import pytest

from adapters.hf_cb import CPU_MAX_BATCH_TOKENS, DEFAULT_KV_CACHE_BYTES, PAGE_SIZE, hf_cb_plan
from adapters.spec import ServingSpec, UnsupportedSpecError
from adapters.target import Machine, ModelInfo, Target

TINY_CFG = {"num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
            "hidden_size": 128, "dtype": "float32"}
# 2 (K and V) x 4 layers x 2 KV heads x 32 dims x 4 bytes (f32) = 2 KiB a token
TOKEN_BYTES = 2048


def target(cfg=TINY_CFG, device="cpu"):
    return Target(ModelInfo("/m", local=True, config=cfg), Machine(device))


def test_golden_plan():
    spec = ServingSpec(model="/m", dtype="float32", max_num_seqs=8, max_num_batched_tokens=256, block_size=32,
                       prefix_caching=False, kv_cache_memory_bytes=64 << 20, max_model_len=512, seed=3,
                       enforce_eager=True, native={"hf-cb": {"scheduler_type": "prefill_first"}})
    assert hf_cb_plan(spec, target()).as_dict() == {
        "model": "/m", "tokenizer": "/m", "device": "cpu",
        "from_pretrained": {"dtype": "float32", "attn_implementation": "sdpa"},
        "continuous_batching_config": {
            "page_size": 32, "seed": 3, "auto_switch_to_flash": False, "max_requests_per_batch": 8,
            "max_batch_tokens": 256, "allow_block_sharing": False, "use_cuda_graph": False,
            "default_compile_level": 0, "num_blocks": (64 << 20) // (TOKEN_BYTES * 32),
            "scheduler_type": "prefill_first"},
        "kv_cache_bytes": 64 << 20, "max_model_len": 512, "num_threads": None,
        "notes": ["max_model_len=512: enforced per request (transformers has no such limit)"],
    }


def test_cpu_defaults_size_the_cache_and_the_batch_explicitly():
    # the engine's own defaults size the cache from the host's free memory and an 8192-token batch
    p = hf_cb_plan(ServingSpec(model="/m"), target())
    assert p.dtype == "float32"  # dtype=auto: the checkpoint's
    assert p.cb_config["num_blocks"] == DEFAULT_KV_CACHE_BYTES // (TOKEN_BYTES * PAGE_SIZE)
    assert p.cb_config["max_batch_tokens"] == CPU_MAX_BATCH_TOKENS
    assert p.kv_cache_bytes == DEFAULT_KV_CACHE_BYTES
    assert any("kv_cache_memory_bytes unset" in n for n in p.notes)
    # bfloat16 halves the bytes a token: twice the blocks in the same memory
    p16 = hf_cb_plan(ServingSpec(model="/m", dtype="bfloat16", kv_cache_memory_bytes=64 << 20), target())
    assert p16.cb_config["num_blocks"] == (64 << 20) // (TOKEN_BYTES // 2 * PAGE_SIZE)


def test_gpu_leaves_sizing_to_the_engine_or_maps_memory_utilization():
    p = hf_cb_plan(ServingSpec(model="/m", gpu_memory_utilization=0.5), target(device="cuda"))
    assert p.cb_config["max_memory_percent"] == 0.5 and "num_blocks" not in p.cb_config
    assert "max_batch_tokens" not in p.cb_config and p.kv_cache_bytes is None


def test_native_num_blocks_overrides_the_byte_size():
    p = hf_cb_plan(ServingSpec(model="/m", native={"hf-cb": {"num_blocks": 7, "attn_implementation": "paged|eager",
                                                             "num_threads": 1}}), target())
    assert p.cb_config["num_blocks"] == 7 and p.attn_implementation == "paged|eager" and p.kv_cache_bytes is None
    assert p.num_threads == 1


@pytest.mark.parametrize("kw,option", [
    (dict(quantization="w8a16-int8"), "quantization"),
    (dict(kv_cache_dtype="fp8"), "kv_cache_dtype"),
    (dict(tensor_parallel=2), "tensor_parallel"),
    (dict(load_format="dummy"), "load_format"),
    (dict(chunked_prefill=False), "chunked_prefill"),
    (dict(gpu_memory_utilization=0.9), "gpu_memory_utilization"),
    (dict(native={"hf-cb": {"nonsense": 1}}), "native nonsense"),
    (dict(native={"hf-cb": {"num_blocks": None}}), "num_blocks"),
    (dict(native={"hf-cb": {"num_threads": 0}}), "num_threads"),
])
def test_refused_with_a_reason(kw, option):
    with pytest.raises(UnsupportedSpecError) as e:
        hf_cb_plan(ServingSpec(model="/m", **kw), target())
    assert option in e.value.option and e.value.reason


def test_a_cache_size_needs_the_model_shape():
    with pytest.raises(UnsupportedSpecError) as e:
        hf_cb_plan(ServingSpec(model="/m", kv_cache_memory_bytes=1 << 26), target(cfg=None))
    assert "num_blocks" in (e.value.alternative or "")
