"""The trained tiny model: deterministic, built atomically, with a provenance file, and trained
enough that its loss clearly dropped (its held-out perplexity is far below the vocabulary size)."""
from __future__ import annotations

import json
import math

import pytest

from tests.conftest import run_cli

# training takes minutes of CPU (the trained model: minutes, once, by the test set-up or here)
pytestmark = pytest.mark.timeout(1800)
slow = pytest.mark.slow


@pytest.fixture(scope="session")
def trained_model():
    from backends.models.train import ensure_trained_model

    return ensure_trained_model()  # cached; a first build trains for minutes


@slow
def test_short_training_is_deterministic_and_atomic(tmp_path):
    from backends.models.train import TrainConfig, ensure_trained_model

    cfg = TrainConfig(steps=3, batch=4, seq_len=64, eval_windows=2, eval_len=64)
    a = ensure_trained_model(tmp_path / "a", cfg)
    b = ensure_trained_model(tmp_path / "b", cfg)
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()
    prov = json.loads((a / "llm_compare_tiny.json").read_text())
    assert prov["trained"] is True and prov["train"]["steps"] == 3 and prov["train"]["seed"] == 0
    assert math.isfinite(prov["train"]["final_train_loss"]) and math.isfinite(prov["heldout"]["perplexity"])
    # nothing but the two published models: the temporary build directories were renamed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]


def test_heldout_split_is_disjoint_and_about_five_percent():
    from backends.models.train import corpus_split

    train, held = corpus_split()
    assert held and not set(train) & set(held)
    assert 0.01 < len(held) / (len(train) + len(held)) < 0.12


@slow
def test_trained_model_learned_and_records_provenance(trained_model, tiny_model):
    prov = json.loads((trained_model / "llm_compare_tiny.json").read_text())
    tr, held = prov["train"], prov["heldout"]
    # from ~ln(4096) = 8.3 at the start; the loss must clearly drop
    assert tr["initial_loss"] > 7.5 and tr["final_train_loss"] < tr["initial_loss"] - 3.0, tr
    assert held["perplexity"] < 150, held
    assert prov["corpus"]["heldout_files"] and prov["corpus"]["train_tokens"] > 100_000
    # the same shape and tokenizer as the random-weight model
    assert (trained_model / "tokenizer.json").read_bytes() == (tiny_model / "tokenizer.json").read_bytes()
    cfg, ref = (json.loads((d / "config.json").read_text()) for d in (trained_model, tiny_model))
    for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
              "vocab_size", "intermediate_size", "tie_word_embeddings"):
        assert cfg[k] == ref[k], k
    assert (trained_model / "model.safetensors").read_bytes() != (tiny_model / "model.safetensors").read_bytes()


@slow
def test_cli_prints_the_cached_trained_model(trained_model):
    r = run_cli("model", "tiny", "--trained", timeout=300)
    assert r.returncode == 0, r.stderr[-1000:]
    assert r.stdout.strip() == str(trained_model)
    assert '"perplexity"' in r.stderr
