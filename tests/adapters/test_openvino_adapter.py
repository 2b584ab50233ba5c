"""ServingSpec -> OpenVINO GenAI plan (pure): every spec field mapped or refused with its reason."""
import pytest

from adapters.openvino import CPU_BLOCK_TOKENS, openvino_plan
from adapters.quant_matrix import SCHEMES
from adapters.spec import ServingSpec, UnsupportedSpecError
from adapters.target import ModelInfo, Target

TINY_CFG = {"num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
            "hidden_size": 128, "dtype": "float32"}


def target(cfg=TINY_CFG, device="cpu"):
    from adapters.target import Machine

    return Target(ModelInfo("/m", local=True, config=cfg), Machine(device))


def test_golden_plan():
    spec = ServingSpec(model="/m", dtype="float32", max_num_seqs=8, max_num_batched_tokens=512,
                       prefix_caching=True, kv_cache_memory_bytes=64 * 2**20, max_model_len=512, seed=3,
                       native={"openvino": {"NUM_STREAMS": 1, "use_cache_eviction": False}})
    p = openvino_plan(spec, target())
    # 2 (K and V) x 4 layers x 2 KV heads x 32 dims x 4 bytes (f32) = 2 KiB a token, 32 tokens a block
    assert p.as_dict() == {
        "device": "CPU",
        "scheduler_config": {"max_num_batched_tokens": 512, "enable_prefix_caching": True,
                             "num_kv_blocks": 64 * 2**20 // (2048 * CPU_BLOCK_TOKENS), "max_num_seqs": 8,
                             "dynamic_split_fuse": False, "use_cache_eviction": False},
        "properties": {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32", "NUM_STREAMS": 1},
        "export": {"weight_format": "fp32"}, "seed": 3, "max_model_len": 512, "verify": True,
        "notes": ["max_num_seqs set: dynamic_split_fuse off (with it on, max_num_seqs has no effect)"],
    }


def test_auto_dtype_follows_the_checkpoint_not_the_plugins_bf16():
    p = openvino_plan(ServingSpec(model="/m"), target())
    assert p.properties["INFERENCE_PRECISION_HINT"] == "f32" and p.export["weight_format"] == "fp32"
    assert any("dtype=auto" in n for n in p.notes)
    p = openvino_plan(ServingSpec(model="/m", dtype="bfloat16"), target())
    assert p.properties["INFERENCE_PRECISION_HINT"] == "bf16" and p.export["weight_format"] == "fp16"


def test_weight_schemes_come_from_the_quantization_table():
    assert openvino_plan(ServingSpec(model="/m", quantization="w8a16-int8"), target()).export == {"weight_format": "int8"}
    assert openvino_plan(ServingSpec(model="/m", quantization="w4a16"), target()).export == {
        "weight_format": "int4", "group_size": 128, "sym": True, "ratio": 1.0}
    for scheme in ("w8a8-int8", "w4a16-awq", "w4a16-gptq", "w8a8-fp8"):
        cell = SCHEMES[scheme].on("openvino").cell("cpu")
        with pytest.raises(UnsupportedSpecError) as e:
            openvino_plan(ServingSpec(model="/m", quantization=scheme), target())
        assert cell.reason in str(e.value) and f"nearest supported: {cell.alternative}" in str(e.value)


@pytest.mark.parametrize("field,value,fragment", [
    ("block_size", 16, "chooses its own KV block size"),
    ("tensor_parallel", 2, "no tensor parallelism"),
    ("load_format", "dummy", "converts real weights"),
    ("gpu_memory_utilization", 0.9, "sized in bytes"),
    ("kv_cache_dtype", "fp8", "no fp8 KV cache"),
    ("tokenizer", "/other", "own tokenizer"),
])
def test_fields_it_cannot_honour_are_refused(field, value, fragment):
    with pytest.raises(UnsupportedSpecError, match=fragment):
        openvino_plan(ServingSpec(model="/m", **{field: value}), target())


def test_max_num_seqs_with_chunked_prefill_is_refused_not_ignored():
    with pytest.raises(UnsupportedSpecError, match="ignores max_num_seqs"):
        openvino_plan(ServingSpec(model="/m", max_num_seqs=4, chunked_prefill=True), target())
    assert openvino_plan(ServingSpec(model="/m", chunked_prefill=True), target()).scheduler == {"dynamic_split_fuse": True}


def test_kv_bytes_need_the_model_shape_and_gpu_is_refused():
    with pytest.raises(UnsupportedSpecError, match="num_kv_blocks"):
        openvino_plan(ServingSpec(model="/m", kv_cache_memory_bytes=2**26), Target.unprobed("/m"))
    with pytest.raises(UnsupportedSpecError, match="CPU plugin only"):
        openvino_plan(ServingSpec(model="/m"), target(device="cuda"))
    with pytest.raises(UnsupportedSpecError, match="not a SchedulerConfig field"):
        openvino_plan(ServingSpec(model="/m", native={"openvino": {"bogus": 1}}), target())
