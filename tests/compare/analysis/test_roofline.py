"""compare/analysis/roofline.py against the real thing: transformers' own parameter counts (meta device, so
the 7B shape costs no memory) and torch's FLOP counter on a real forward pass of the tiny model."""
from __future__ import annotations

import json

import pytest

from compare.analysis.roofline import Ceilings, ModelShape, Work, dtype_bytes

QWEN7B = "models/qwen2.5-7b-config.json"


def _hf_param_count(cfg: dict) -> int:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    conf = AutoConfig.for_model(**cfg)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(conf)
    # tied weights are one tensor: count each parameter once, as they occupy memory once
    return sum(p.numel() for p in model.parameters())


def _qwen7b(fixtures_dir) -> dict:
    return json.loads((fixtures_dir / QWEN7B).read_text())


def test_qwen25_7b_params_match_transformers(fixtures_dir):
    cfg = _qwen7b(fixtures_dir)
    shape = ModelShape.from_hf_config(cfg)
    counts = shape.param_counts()
    # the exact 7B shape with 2 of its 28 identical layers (building all 28, even on the meta
    # device, takes a minute of CPU): embedding, head and per-layer counts are all exercised
    two = {**cfg, "num_hidden_layers": 2}
    assert ModelShape.from_hf_config(two).param_counts()["total"] == _hf_param_count(two)
    # published size of Qwen2.5-7B: 7.61B parameters, 6.53B without embeddings
    assert round(counts["total"] / 1e9, 2) == 7.62
    assert round((counts["total"] - counts["embedding"] - counts["lm_head"]) / 1e9, 2) == 6.53


@pytest.mark.parametrize("family,extra", [
    ("llama", {"attention_bias": True}),
    ("mistral", {}),
    ("qwen2", {"tie_word_embeddings": True}),
])
def test_small_configs_match_transformers(family, extra):
    cfg = {"model_type": family, "hidden_size": 96, "num_hidden_layers": 3, "num_attention_heads": 6,
           "num_key_value_heads": 2, "intermediate_size": 200, "vocab_size": 512,
           "tie_word_embeddings": False, **extra}
    assert ModelShape.from_hf_config(cfg).param_counts()["total"] == _hf_param_count(cfg)


def test_prefill_flops_match_torch_flop_counter(tiny_model):
    """Real forward of the tiny Qwen2 (eager attention: plain matmuls over the full, masked n x n
    scores, so counted as non-causal; logits for the last token only) under FlopCounterMode."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model, attn_implementation="eager").eval()
    shape = ModelShape.from_hf_config(json.loads((tiny_model / "config.json").read_text()))
    n = 48
    ids = torch.randint(10, 3000, (1, n))
    with torch.no_grad(), FlopCounterMode(display=False) as fc:
        model(input_ids=ids, logits_to_keep=1)
    ours = shape.prefill([n], w_bytes=4, kv_bytes=4, causal=False).flops
    assert ours == fc.get_total_flops()


def test_decode_step_bytes_and_kv():
    cfg = {"model_type": "qwen2", "hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28,
           "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064,
           "tie_word_embeddings": False}
    s = ModelShape.from_hf_config(cfg)
    # Qwen2.5-7B: 28 layers x 4 KV heads x 128 dims x (K+V) x 2 bytes = 57,344 bytes per token
    assert s.kv_bytes_per_token(2) == 57344
    one = s.decode_step([1000], w_bytes=2, kv_bytes=2)
    two = s.decode_step([1000, 3000], w_bytes=2, kv_bytes=2)
    # a second sequence adds its KV traffic and one embedding row, never the weights again
    assert two.bytes - one.bytes == 3000 * 57344 + 57344 + 3584 * 2
    pc = s.param_counts()
    assert one.detail["weight_bytes"] == (pc["total"] - pc["embedding"] + 3584) * 2


def test_ceilings_floor_and_point():
    c = Ceilings(bandwidth=4e12, flops=800e12)
    mem = Work(bytes=int(4e9), flops=int(8e12), detail={})  # 1 ms of bytes, 10 ms of flops
    assert c.bound(mem) == "compute"
    assert c.floor_s(mem) == pytest.approx(0.01)
    p = c.point(Work(bytes=int(8e9), flops=10, detail={}), measured_s=0.004)
    assert p["bound"] == "memory"
    assert p["floor_ms"] == pytest.approx(2.0)
    assert p["fraction_of_roofline"] == pytest.approx(0.5)
    assert p["multiple_of_floor"] == pytest.approx(2.0)


def test_refuses_unknown_shapes():
    with pytest.raises(ValueError, match="mixture-of-experts"):
        ModelShape.from_hf_config({"model_type": "mixtral", "num_local_experts": 8})
    with pytest.raises(ValueError, match="gpt2"):
        ModelShape.from_hf_config({"model_type": "gpt2"})
    with pytest.raises(ValueError, match="unknown dtype"):
        dtype_bytes("float8")
    assert dtype_bytes("torch.bfloat16") == 2
