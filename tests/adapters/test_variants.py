"""adapters/variants.py: --vary parsing (the field's own type and bounds), the grid, names that
hold brackets and commas."""
from __future__ import annotations

import pytest

from adapters.spec import ServingSpec
from adapters.variants import Variant, expand, parse_axes, parse_axis, split_names, split_variant
from core.errors import UserError


def test_values_take_the_fields_type_and_the_grid_names_every_override():
    axes = parse_axes(["block_size=32,64", "chunked-prefill=true,false"])
    assert axes[0].values == (32, 64) and axes[1].field == "chunked_prefill" and axes[1].values == (True, False)
    names = [v.name for v in expand(["vllm"], axes)]
    assert names == ["vllm[block_size=32,chunked_prefill=true]", "vllm[block_size=32,chunked_prefill=false]",
                     "vllm[block_size=64,chunked_prefill=true]", "vllm[block_size=64,chunked_prefill=false]"]
    spec = Variant("vllm", (("block_size", 64), ("max_num_seqs", 4))).apply(ServingSpec(model="m", max_num_seqs=8))
    assert (spec.block_size, spec.max_num_seqs, spec.model) == (64, 4, "m")
    assert parse_axis("block_size=default,32").values == (None, 32)  # the framework's own default


@pytest.mark.parametrize("text, words", [
    ("nope=1,2", ["unknown field 'nope'", "valid fields: dtype", "block_size"]),
    ("block_size", ["expected FIELD=V1,V2"]),
    ("block_size=0", ["block_size=0", "greater than 0"]),
    ("dtype=float8", ["dtype=float8"]),
    ("block_size=16,016", ["16 and 016 are the same value"]),
    ("tensor_parallel=default", ["no framework default"]),
    ("model=a,b", ["unknown field 'model'"]),
])
def test_bad_vary_is_one_line_naming_the_problem(text, words):
    with pytest.raises(UserError) as e:
        parse_axis(text)
    assert "\n" not in str(e.value) and all(w in str(e.value) for w in words), str(e.value)


def test_a_field_named_twice_is_refused():
    with pytest.raises(UserError, match="names block_size twice"):
        parse_axes(["block_size=32", "block_size=64"])


def test_names_with_brackets_and_commas_survive_lists_and_split_back():
    grid = "vllm[block_size=32,max_num_seqs=8]"
    assert split_names(f"{grid},hf, tp@2*vllm[seed=1]") == [grid, "hf", "tp@2*vllm[seed=1]"]
    assert split_variant(grid) == ("vllm", {"block_size": "32", "max_num_seqs": "8"})
    assert split_variant("replicas@2*vllm:lb=lor") == ("replicas@2*vllm:lb=lor", {})


def test_vllm_on_cpu_refuses_a_block_size_its_attention_kernel_cannot_take():
    # a --vary block_size=16,32 on CPU is refused up front instead of failing after an engine start
    from adapters.spec import UnsupportedSpecError
    from adapters.target import Target
    from adapters.vllm import vllm_engine_args

    with pytest.raises(UnsupportedSpecError, match=r"block_size=16: vLLM's CPU attention kernel takes multiples "
                                                   r"of 32 \(nearest supported: block_size=32\)"):
        vllm_engine_args(ServingSpec(model="/m", block_size=16), Target.unprobed("/m", "cpu"))
    assert vllm_engine_args(ServingSpec(model="/m", block_size=16), Target.unprobed("/m", "cuda"))["block_size"] == 16
    assert vllm_engine_args(ServingSpec(model="/m", block_size=64), Target.unprobed("/m", "cpu"))["block_size"] == 64
