"""compare/running/variants.py: which knob variants a backend can run, decided from the adapters'
plans before anything starts; the CLI refuses the rest with one line, exit 2, nothing written."""
from __future__ import annotations

import pytest

from adapters.spec import ServingSpec
from adapters.variants import parse_axes
from compare.running.variants import vary
from core.errors import UserError
from tests.compare.cli.test_cli_bad_input import assert_one_line_error
from tests.conftest import cli


def test_variants_carry_their_spec_and_say_which_one_is_the_base(tiny_model):
    base = ServingSpec(model=str(tiny_model), max_num_seqs=4)
    v = vary(["vllm", "hf-cb"], lambda _: base, parse_axes(["max_num_seqs=1,4", "block_size=32,64"]))
    assert [t.name for t in v.targets][:2] == ["vllm[max_num_seqs=1,block_size=32]", "vllm[max_num_seqs=1,block_size=64]"]
    assert len(v.targets) == 8 and v.specs["hf-cb[max_num_seqs=4,block_size=64]"].max_num_seqs == 4
    assert v.header["columns"]["vllm[max_num_seqs=4,block_size=32]"] == {
        "backend": "vllm", "overrides": {"max_num_seqs": 4, "block_size": 32}, "base_value": ["max_num_seqs"]}
    # block_size is not set in the base, so no column is the base spec itself
    assert not [n for n in v.notes if "runs the base spec" in n]
    v = vary(["vllm"], lambda _: base, parse_axes(["max_num_seqs=1,4"]))
    assert v.notes == ["vllm[max_num_seqs=4] runs the base spec's own max_num_seqs=4"]
    v = vary(["vllm"], lambda _: base.model_copy(update={"max_num_seqs": 8}), parse_axes(["max_num_seqs=1,4"]))
    assert v.notes == ["vllm: the base spec's max_num_seqs=8 is not among --vary max_num_seqs=1,4 and is not run"]


def test_a_backend_that_ignores_or_refuses_the_field_is_refused(tiny_model):
    base = ServingSpec(model=str(tiny_model))
    with pytest.raises(UserError, match=r"hf ignores max_num_seqs \(it records the field as not applicable"):
        vary(["vllm", "hf"], lambda _: base, parse_axes(["max_num_seqs=1,4"]))
    with pytest.raises(UserError, match=r"openvino\[block_size=32\] cannot run: openvino cannot honour block_size=32"):
        vary(["openvino"], lambda _: base, parse_axes(["block_size=32,64"]))


@pytest.mark.isa
def test_quantization_runs_each_engines_own_schemes_and_says_what_it_did_not_run(tiny_model):
    """--vary quantization compares engines' own schemes: a value an adapter refuses is not run on
    that backend (a note with its reason, run.json variants.not_run); no runnable value refuses."""
    base = ServingSpec(model=str(tiny_model))
    v = vary(["vllm", "llamacpp"], lambda _: base, parse_axes(["quantization=w8a8-fp8,gguf-q8_0"]))
    assert [t.name for t in v.targets] == ["vllm[quantization=w8a8-fp8]", "llamacpp[quantization=gguf-q8_0]"]
    assert v.specs["llamacpp[quantization=gguf-q8_0]"].quantization == "gguf-q8_0"
    assert set(v.header["not_run"]) == {"vllm[quantization=gguf-q8_0]", "llamacpp[quantization=w8a8-fp8]"}
    assert "ggml has no FP8" in v.header["not_run"]["llamacpp[quantization=w8a8-fp8]"]
    assert any(n.startswith("vllm[quantization=gguf-q8_0] not run: ") for n in v.notes)
    with pytest.raises(UserError, match=r"llamacpp runs none of these values \(llamacpp cannot honour"):
        vary(["llamacpp"], lambda _: base, parse_axes(["quantization=w8a8-fp8,w4a16"]))
    # other fields keep the rule: a refused value refuses the run
    with pytest.raises(UserError, match=r"cannot run: llamacpp cannot honour block_size"):
        vary(["llamacpp"], lambda _: base, parse_axes(["block_size=16,32"]))


@pytest.mark.parametrize("args, needles", [
    (["--backends", "vllm", "--vary", "nope=1"], ["--vary 'nope=1': unknown field 'nope'", "valid fields:"]),
    (["--backends", "vllm,hf", "--vary", "max_num_seqs=1,4"], ["hf ignores max_num_seqs"]),
    (["--backends", "vllm", "--require-slo"], ["--require-slo", "give one, e.g. --slo"]),
    (["--backends", "vllm[max_num_seqs=4,block_size=32]"], ["knob variants are made with --vary",
                                                              "--vary max_num_seqs=4 --vary block_size=32"]),
])
def test_cli_refuses_with_one_line_and_writes_nothing(tmp_path, tiny_model, args, needles):
    out = tmp_path / "results"
    assert_one_line_error(cli("run", "--model", str(tiny_model), *args, "--out", str(out)), *needles)
    assert not out.exists()


def test_a_topology_varies_like_any_backend_and_is_priced_by_its_devices(tiny_model):
    from backends.topology.target import Topology
    from compare.analysis.cost import devices

    base = ServingSpec(model=str(tiny_model))
    v = vary([Topology("replicas", 2, "vllm", lb="lor")], lambda _: base, parse_axes(["max_num_seqs=2,4"]))
    assert [t.name for t in v.targets] == ["replicas@2*vllm:lb=lor[max_num_seqs=2]", "replicas@2*vllm:lb=lor[max_num_seqs=4]"]
    assert [devices(t.name, v.specs[t.name]) for t in v.targets] == [2, 2]
