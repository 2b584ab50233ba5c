"""The model and machine are probed once into a Target, and each backend's plan is resolved once."""
from __future__ import annotations

import json

from adapters.quant import DUMMY_QUANT_CONFIGS, checkpoint_scheme
from adapters.spec import ServingSpec
from adapters.vllm import VllmPlan
from backends import registry
from backends.models.probe import probe, probe_model


def test_probe_reads_the_checkpoint_once_into_a_value(tiny_model, tmp_path):
    t = probe(str(tiny_model))
    assert t.model.local and t.model.config["hidden_size"] == json.loads(
        (tiny_model / "config.json").read_text())["hidden_size"]
    assert t.device in ("cpu", "cuda")
    assert checkpoint_scheme(t.model) is None  # the tiny model is unquantized
    assert not probe_model(str(tmp_path / "absent")).local
    # provenance decides GPTQ vs round-to-nearest for pack-quantized W4A16
    d = tmp_path / "w4"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"quantization_config": DUMMY_QUANT_CONFIGS["w4a16"]}))
    assert checkpoint_scheme(probe_model(str(d))) == "w4a16"
    (d / "llm_compare_quant.json").write_text(json.dumps({"scheme": "w4a16-gptq"}))
    assert checkpoint_scheme(probe_model(str(d))) == "w4a16-gptq"


def test_the_plan_is_resolved_once_and_reused_by_every_build(tiny_model):
    spec = ServingSpec(model=str(tiny_model), quantization="w8a8-fp8", max_num_seqs=4)
    builder = registry.Builder()
    first = builder.prepare("vllm", spec)
    assert builder.prepare("vllm", spec) is first  # a repeat reuses it
    assert isinstance(first.native, VllmPlan)
    a, b = builder("vllm", spec), builder("vllm", spec)  # two repeats: fresh backends, one plan
    assert a is not b and a.engine_args == b.engine_args == dict(first.native.engine_args)
    assert first.plan()["engine_args"] == a.engine_args
    # another spec is another plan
    assert builder.prepare("vllm", spec.model_copy(update={"max_num_seqs": 8})) is not first


def test_capabilities_are_declared_once():
    """The registry shows what the backend class reports (same value, not a second declaration)."""
    from backends.hf import CAPS as HF_CAPS
    from backends.vllm import CAPS as VLLM_CAPS

    by_name = {e.name: e for e in registry.entries()}
    assert by_name["vllm"].capabilities is VLLM_CAPS and by_name["hf"].capabilities is HF_CAPS
    assert by_name["tgi"].capabilities.forced_output_length is False
    assert by_name["openai"].capabilities.token_id_prompts is True
