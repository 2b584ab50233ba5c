"""The quantization matrix, checkpoint detection and the vLLM mapping (pure; no engine starts)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from adapters import trtllm_support as trt
from adapters.quant import (
    DUMMY_QUANT_CONFIGS, MATRIX_NAMES, NEEDS_CALIBRATION, QUANTIZE_SCHEMES, SCHEMES, cell, check,
    detect_checkpoint_scheme, scheme_of_spec, vllm_quant_args,
)
from adapters.quant_matrix import QUANTIZATION_VALUES, TABLE
from adapters.spec import ServingSpec, UnsupportedSpecError
from adapters.target import Machine, ModelInfo, Target
from adapters.tgi import TGI_QUANTIZE
from backends.models.dummy import dummy_dir, place
from backends.models.probe import probe
from core.hardware import cpu_flags, has_isa
from compare.quality.verify import verify
from tests.conftest import FIXTURES, cli

# every test here answers by the CPU's instruction sets (run again under LLM_COMPARE_CPU_ISA=avx2, avx512)
pytestmark = pytest.mark.isa


def test_every_scheme_has_a_cell_per_backend_and_device():
    for backend in ("vllm", "tgi", "trtllm", "hf"):
        for device in ("cpu", "cuda"):
            for s in MATRIX_NAMES:
                c = cell(backend, s, device)
                # an unsupported cell always says why; a supported one says how and with what kernel
                assert (c.reason if not c.supported else c.how and c.kernel), (backend, s, device)


@pytest.mark.parametrize("backend, scheme, device, nearest", [
    ("vllm", "w8a16-int8", "cpu", "w8a8-int8"),  # CPUWNA16 takes 4-bit weights only
    ("vllm", "fp16", "cpu", "bf16"),
    ("tgi", "fp32", "cuda", "bf16"),  # launcher --dtype: float16 | bfloat16
    ("trtllm", "w4a16", "cuda", "w4a16-awq"),
    ("hf", "w8a8-int8", "cpu", "fp32"),  # the reference stays unquantized
])
def test_unsupported_names_the_nearest_alternative(backend, scheme, device, nearest):
    with pytest.raises(UnsupportedSpecError) as e:
        check(backend, scheme, device)
    assert f"nearest supported: {nearest}" in str(e.value)


def test_matrix_agrees_with_the_tgi_and_trtllm_adapters():
    """The matrix says what the real adapters emit (their mappings derive from the same table)."""
    # TGI names every weight scheme but llama.cpp's GGUF types
    assert set(TGI_QUANTIZE) == set(QUANTIZATION_VALUES) - {"gguf-q8_0", "gguf-q4_k_m"}
    for s, flag in TGI_QUANTIZE.items():
        if flag:
            assert f"--quantize {flag}" in check("tgi", s, "cuda").how
    for s in ("w4a16-awq", "w4a16-gptq", "w4a16", "w8a16-int8", "w8a8-int8", "w8a8-fp8"):
        algo = trt.NEUTRAL.get(s)
        c = cell("trtllm", s, "cuda")
        assert c.supported == (algo is not None)
        if algo:
            assert algo in c.how and algo in SCHEMES[s].methods_for("trtllm") and algo in trt.SCHEMES


def test_one_table_feeds_the_spec_and_compare_quantize():
    assert QUANTIZATION_VALUES == ("none",) + tuple(s.name for s in TABLE if s.kind == "weights")
    for name in QUANTIZATION_VALUES:
        ServingSpec(model="/m", quantization=name)  # every table scheme is a legal spec value
    with pytest.raises(ValueError):
        ServingSpec(model="/m", quantization="w3a16")
    # compare quantize makes what llmcompressor has a preset for; only GPTQ calibrates
    assert set(QUANTIZE_SCHEMES) == {"w8a8-int8", "w4a16", "w4a16-gptq", "w8a8-fp8"}
    assert NEEDS_CALIBRATION == ("w4a16-gptq",)
    for s in TABLE:
        if s.kind == "weights":
            assert s.weight_bits and s.weight_type in ("int", "float") and s.act_bits, s.name
    assert SCHEMES["w4a16"].needs_checkpoint("vllm", "cpu")
    assert not SCHEMES["w8a8-fp8"].needs_checkpoint("vllm", "cpu")  # online FP8


def _ct_config(weights_bits: int, wtype: str, act_bits: int | None) -> dict:
    return {"quantization_config": {"quant_method": "compressed-tensors", "config_groups": {"g": {
        "weights": {"num_bits": weights_bits, "type": wtype},
        "input_activations": {"num_bits": act_bits, "type": wtype} if act_bits else None}}}}


@pytest.mark.parametrize("cfg, name", [
    ({}, None),
    (_ct_config(8, "int", 8), "w8a8-int8"),
    (_ct_config(8, "int", None), "w8a16-int8"),
    (_ct_config(4, "int", None), "w4a16"),
    (_ct_config(8, "float", 8), "w8a8-fp8"),
    (json.loads(FIXTURES.joinpath(
        "models/qwen2.5-7b-awq-config.json").read_text()), "w4a16-awq"),
    (json.loads(FIXTURES.joinpath(
        "models/qwen2.5-7b-gptq-config.json").read_text()), "w4a16-gptq"),
])
def test_detect_checkpoint_scheme(cfg, name):
    assert detect_checkpoint_scheme(cfg) == name


def test_dummy_configs_are_detected_as_their_own_scheme():
    for scheme, qc in DUMMY_QUANT_CONFIGS.items():
        assert detect_checkpoint_scheme({"quantization_config": qc}) == scheme


def _on(model, device: str) -> Target:
    return Target(probe(str(model)).model, Machine(device))


def test_vllm_refuses_schemes_an_unquantized_checkpoint_cannot_become(tiny_model):
    cpu = _on(tiny_model, "cpu")
    with pytest.raises(UnsupportedSpecError) as e:
        vllm_quant_args(ServingSpec(model=str(tiny_model), quantization="w4a16"), cpu)
    assert "compare quantize" in str(e.value) and "is not quantized" in str(e.value)
    # online FP8 is the one scheme vLLM makes at load time
    assert vllm_quant_args(ServingSpec(model=str(tiny_model), quantization="w8a8-fp8"), cpu) == (
        {"quantization": "fp8_per_channel"}, None)
    assert vllm_quant_args(ServingSpec(model=str(tiny_model)), cpu) == ({}, None)


def test_a_quantized_checkpoint_must_be_the_requested_scheme():
    """Pure: the probed facts come in as a value, nothing is read."""
    awq = json.loads(FIXTURES.joinpath("models/qwen2.5-7b-awq-config.json").read_text())
    t = Target(ModelInfo("/ckpt", local=True, config=awq), Machine("cuda"))
    assert vllm_quant_args(ServingSpec(model="/ckpt", quantization="w4a16-awq"), t) == ({}, None)
    with pytest.raises(UnsupportedSpecError) as e:
        vllm_quant_args(ServingSpec(model="/ckpt", quantization="w4a16-gptq"), t)
    assert "--quantization w4a16-awq" in str(e.value)
    with pytest.raises(UnsupportedSpecError, match="labelled unquantized"):
        vllm_quant_args(ServingSpec(model="/ckpt"), t)
    # pack-quantized W4A16: GPTQ or round-to-nearest, told apart by the provenance
    w4 = {"quantization_config": DUMMY_QUANT_CONFIGS["w4a16"]}
    assert detect_checkpoint_scheme(w4) == "w4a16"
    assert detect_checkpoint_scheme(w4, made_with_gptq=True) == "w4a16-gptq"


def test_dummy_weights_get_a_config_only_copy_with_the_scheme(tiny_model, tmp_path, monkeypatch):
    monkeypatch.setenv("LLM_COMPARE_CACHE", str(tmp_path))
    spec = ServingSpec(model=str(tiny_model), quantization="w4a16-awq", load_format="dummy")
    args, copy = vllm_quant_args(spec, _on(tiny_model, "cuda"))
    assert args == {"tokenizer": str(tiny_model)} and copy is not None
    assert not dummy_dir(copy).exists()  # described by the adapter, written only by the I/O layer
    d = place(copy)
    assert d == dummy_dir(copy)
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["quantization_config"]["quant_method"] == "awq"
    assert cfg["hidden_size"] == json.loads((tiny_model / "config.json").read_text())["hidden_size"]
    assert not list(d.glob("*.safetensors"))  # weights are never copied
    assert (d / "tokenizer.json").is_file()
    # content-addressed: the same request names the same directory, reused not rewritten
    mtime = (d / "config.json").stat().st_mtime_ns
    assert place(vllm_quant_args(spec, _on(tiny_model, "cuda"))[1]) == d
    assert (d / "config.json").stat().st_mtime_ns == mtime
    # online fp8 needs no copy
    assert vllm_quant_args(ServingSpec(model=str(tiny_model), quantization="w8a8-fp8", load_format="dummy"),
                           _on(tiny_model, "cuda")) == ({"quantization": "fp8"}, None)


def test_scheme_of_spec():
    assert scheme_of_spec(ServingSpec(model="/m", dtype="bfloat16", kv_cache_dtype="fp8")) == {
        "weights": "bf16", "dtype": "bfloat16", "kv_cache": "kv-cache-fp8"}
    assert scheme_of_spec(ServingSpec(model="/m", quantization="w8a8-int8"))["weights"] == "w8a8-int8"


def test_verify_catches_a_quantized_request_that_loaded_dense_weights():
    """The H200 GPTQ case: method resolved but no quantized kernel and bf16-sized weights."""
    report = {"method": "gptq", "dtype": "bfloat16", "linear_ratio": 1.0,
              "linear_groups": [{"method": "UnquantizedLinearMethod", "scheme": None, "kernel": None, "layers": 196}]}
    v = verify(ServingSpec(model="/m", quantization="w4a16-gptq"), report, framework="vllm")
    assert v["valid"] is False and v["status"] == "invalid"
    text = " ".join(v["problems"])
    assert "UnquantizedLinearMethod" in text and "1.00x" in text
    ok = verify(ServingSpec(model="/m", quantization="w4a16-gptq"), {
        "method": "gptq_marlin", "dtype": "bfloat16", "linear_ratio": 0.27,
        "linear_groups": [{"method": "GPTQMarlinLinearMethod", "scheme": None, "kernel": "MacheteLinearKernel",
                           "layers": 196}]}, framework="vllm")
    assert ok["valid"] is True, ok["problems"]
    assert verify(ServingSpec(model="/m"), None, framework="vllm")["status"] == "unverified"


def test_cli_matrix_json_and_check_exit_codes():
    r = cli("quant", "matrix", "--device", "cpu", "--json")
    assert r.returncode == 0, r.stderr
    rows = {row["scheme"]: row for row in json.loads(r.stdout)["rows"]}
    assert set(rows) == set(MATRIX_NAMES)
    assert rows["w8a8-int8"]["vllm"]["kernel"].startswith("CPUInt8ScaledMMLinearKernel")
    assert rows["w4a16"]["vllm"]["kernel"].startswith("CPUWNA16LinearKernel")
    r = cli("quant", "check", "--backend", "vllm", "--scheme", "w8a16-int8", "--device", "cpu")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "nearest supported: w8a8-int8" in r.stderr


def test_cli_plan_refuses_a_scheme_the_backend_cannot_load(tiny_model):
    r = cli("plan", "--backends", "vllm", "--model", str(tiny_model), "--quantization", "w8a16-int8")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "w8a16-int8" in r.stderr and "nearest supported: w8a8-int8" in r.stderr
    r = cli("plan", "--backends", "vllm", "--model", str(tiny_model), "--quantization", "w4a16")
    # without AVX-512 (vLLM's 4-bit CPU GEMM) that is refused first: a checkpoint would not help
    here = cpu_flags()
    assert r.returncode == 2 and ("compare quantize" if here is None or has_isa(here, "AVX-512")
                                  else "needs AVX-512") in r.stderr, r.stderr


def test_tgi_and_trtllm_reports_are_judged_by_the_same_rules():
    from compare.quality.verify import from_tgi, from_trtllm_config

    # TGI: /info has no quantization field; the launch flag (or the checkpoint, as TGI reads it) decides
    # TGI 3.3's /info has no model_dtype: float16 is what its server forces for AWQ
    rep = from_tgi({"--quantize": "awq"}, {"model_id": "/m", "version": "3.3.7"}, None)
    assert rep.method == "awq" and rep.dtype == "float16"
    assert from_tgi({"--dtype": "bfloat16"}, {"model_id": "/m"}, None).dtype == "bfloat16"
    # no dtype said: none reported (not a null), and why; run.json's object as before, keys in its order
    assert list(from_tgi({}, {"model_id": "/m"}, None).as_json().items()) == [
        ("method", None), ("kernels", []), ("source", "launch flags + checkpoint config"),
        ("dtype_note", "TGI's per-model default (not reported by TGI 3.3's /info)")]
    assert verify(ServingSpec(model="/m", quantization="w4a16-awq"), rep, framework="tgi")["valid"] is True
    rep = from_tgi({}, {}, {"quantization_config": {"quant_method": "gptq"}})
    bad = verify(ServingSpec(model="/m", quantization="w4a16-awq"), rep, framework="tgi")
    assert bad["valid"] is False and "'gptq'" in bad["problems"][0]
    # TensorRT-LLM engine config.json
    cfg = {"pretrained_config": {"dtype": "bfloat16", "quantization": {"quant_algo": "FP8",
                                                                        "kv_cache_quant_algo": "FP8"}}}
    rep = from_trtllm_config(cfg)
    spec = ServingSpec(model="/m", quantization="w8a8-fp8", kv_cache_dtype="fp8")
    assert verify(spec, rep, framework="trtllm")["valid"] is True
    rep = from_trtllm_config({"pretrained_config": {"dtype": "bfloat16", "quantization": {"quant_algo": None}}})
    assert verify(spec, rep, framework="trtllm")["valid"] is False
