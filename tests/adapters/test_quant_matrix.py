"""The quantization matrix, checkpoint detection and the vLLM mapping (pure; no engine starts)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from adapters.quant import (
    DUMMY_QUANT_CONFIGS, MATRIX_NAMES, SCHEMES, check, detect_checkpoint_scheme, dummy_model_dir,
    scheme_of_spec, vllm_quant_args,
)
from adapters.spec import ServingSpec, UnsupportedSpecError
from compare.quality.verify import verify
from tests.conftest import FIXTURES, run_cli


def test_every_scheme_has_a_cell_per_backend_and_device():
    from adapters.quant import cell

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
    """The matrix must say what the real adapters emit (when those adapters are present)."""
    tgi = pytest.importorskip("adapters.tgi")
    for s, flag in tgi.TGI_QUANTIZE.items():
        if flag:
            assert f"--quantize {flag}" in check("tgi", s, "cuda").how
    trt = pytest.importorskip("adapters.trtllm_support")
    for s in ("w4a16-awq", "w4a16-gptq", "w4a16", "w8a16-int8", "w8a8-int8", "w8a8-fp8"):
        algo = trt.NEUTRAL.get(s)
        from adapters.quant import cell

        c = cell("trtllm", s, "cuda")
        assert c.supported == (algo is not None)
        if algo:
            assert algo in c.how and algo in SCHEMES[s].methods_for("trtllm")


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


def test_vllm_refuses_schemes_an_unquantized_checkpoint_cannot_become(tiny_model):
    with pytest.raises(UnsupportedSpecError) as e:
        vllm_quant_args(ServingSpec(model=str(tiny_model), quantization="w4a16"), "cpu")
    assert "compare quantize" in str(e.value) and "is not quantized" in str(e.value)
    # online FP8 is the one scheme vLLM makes at load time
    assert vllm_quant_args(ServingSpec(model=str(tiny_model), quantization="w8a8-fp8"), "cpu") == {
        "quantization": "fp8_per_channel"}
    assert vllm_quant_args(ServingSpec(model=str(tiny_model)), "cpu") == {}


def test_dummy_weights_get_a_config_only_copy_with_the_scheme(tiny_model, tmp_path, monkeypatch):
    monkeypatch.setenv("LLM_COMPARE_CACHE", str(tmp_path))
    args = vllm_quant_args(ServingSpec(model=str(tiny_model), quantization="w4a16-awq", load_format="dummy"), "cuda")
    d = Path(args["model"])
    assert args["tokenizer"] == str(tiny_model)
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["quantization_config"]["quant_method"] == "awq"
    assert cfg["hidden_size"] == json.loads((tiny_model / "config.json").read_text())["hidden_size"]
    assert not list(d.glob("*.safetensors"))  # weights are never copied
    assert (d / "tokenizer.json").is_file()
    # reused, not rewritten
    assert dummy_model_dir(str(tiny_model), "w4a16-awq") == d
    # online fp8 needs no copy
    assert vllm_quant_args(ServingSpec(model=str(tiny_model), quantization="w8a8-fp8", load_format="dummy"),
                           "cuda") == {"quantization": "fp8"}


def test_scheme_of_spec():
    assert scheme_of_spec(ServingSpec(model="/m", dtype="bfloat16", kv_cache_dtype="fp8")) == {
        "weights": "bf16", "dtype": "bfloat16", "kv_cache": "kv-cache-fp8"}
    assert scheme_of_spec(ServingSpec(model="/m", quantization="w8a8-int8"))["weights"] == "w8a8-int8"


def test_verify_catches_a_quantized_request_that_loaded_dense_weights():
    """The H200 GPTQ case: method resolved but no quantized kernel and bf16-sized weights."""
    report = {"method": "gptq", "dtype": "bfloat16", "linear_ratio": 1.0,
              "linear_groups": [{"method": "UnquantizedLinearMethod", "scheme": None, "kernel": None, "layers": 196}]}
    v = verify(ServingSpec(model="/m", quantization="w4a16-gptq"), report)
    assert v["valid"] is False and v["status"] == "invalid"
    text = " ".join(v["problems"])
    assert "UnquantizedLinearMethod" in text and "1.00x" in text
    ok = verify(ServingSpec(model="/m", quantization="w4a16-gptq"), {
        "method": "gptq_marlin", "dtype": "bfloat16", "linear_ratio": 0.27,
        "linear_groups": [{"method": "GPTQMarlinLinearMethod", "scheme": None, "kernel": "MacheteLinearKernel",
                           "layers": 196}]})
    assert ok["valid"] is True, ok["problems"]
    assert verify(ServingSpec(model="/m"), None)["status"] == "unverified"


def test_cli_matrix_json_and_check_exit_codes():
    r = run_cli("quant", "matrix", "--device", "cpu", "--json")
    assert r.returncode == 0, r.stderr
    rows = {row["scheme"]: row for row in json.loads(r.stdout)["rows"]}
    assert set(rows) == set(MATRIX_NAMES)
    assert rows["w8a8-int8"]["vllm"]["kernel"].startswith("CPUInt8ScaledMMLinearKernel")
    assert rows["w4a16"]["vllm"]["kernel"].startswith("CPUWNA16LinearKernel")
    r = run_cli("quant", "check", "--backend", "vllm", "--scheme", "w8a16-int8", "--device", "cpu")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "nearest supported: w8a8-int8" in r.stderr


def test_cli_plan_refuses_a_scheme_the_backend_cannot_load(tiny_model):
    r = run_cli("plan", "--backends", "vllm", "--model", str(tiny_model), "--quantization", "w8a16-int8")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "w8a16-int8" in r.stderr and "nearest supported: w8a8-int8" in r.stderr
    r = run_cli("plan", "--backends", "vllm", "--model", str(tiny_model), "--quantization", "w4a16")
    assert r.returncode == 2 and "compare quantize" in r.stderr


def test_tgi_and_trtllm_reports_are_judged_by_the_same_rules():
    from compare.quality.verify import from_tgi, from_trtllm_config

    # TGI: /info has no quantization field; the launch flag (or the checkpoint, as TGI reads it) decides
    rep = from_tgi({"--quantize": "awq"}, {"model_dtype": "torch.float16"}, None)
    assert rep["method"] == "awq" and rep["dtype"] == "float16"
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
