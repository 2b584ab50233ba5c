"""A tiny real Qwen2 model built locally: random weights, a byte-level BPE tokenizer trained on
local text (the Python stdlib sources). Deterministic, seconds to build, no download.

Shape: hidden 128, 4 layers, 4 query / 2 KV heads, head_dim 32 (vLLM's CPU attention needs
head_dim in {32, 64, ...}), vocab 4096, fp32, ~1.1 M parameters.
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import sysconfig
import tempfile
from pathlib import Path
from typing import Any, Callable

TINY_VERSION = "qwen2-tiny-v1"
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def cache_root() -> Path:
    return Path(os.environ.get("LLM_COMPARE_CACHE", Path.home() / ".cache" / "llm-compare"))


def default_tiny_dir() -> Path:
    return cache_root() / "models" / TINY_VERSION


def ensure_tiny_model(out: Path | None = None, vocab: int = 4096) -> Path:
    """Build once; later calls return the cached directory. Built in a temp dir, then renamed."""
    return build_atomically(Path(out) if out else default_tiny_dir(), lambda tmp: _build(tmp, vocab))


def build_atomically(out: Path, build: Callable[[Path], None]) -> Path:
    """``build(tmp)`` in a temporary sibling directory, renamed to ``out`` when complete: an
    interrupted build leaves nothing that looks like a model. A complete ``out`` is returned as is."""
    if (out / "config.json").exists() and (out / "model.safetensors").exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        build(tmp)
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _build(out: Path, vocab: int) -> None:
    import torch
    from transformers import Qwen2ForCausalLM

    hf_tok, files = build_tokenizer(out, vocab)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(tiny_config(hf_tok, vocab))
    # a larger init std than the default keeps greedy outputs from collapsing into repetition
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.1)
    model = model.to(torch.float32)
    model.save_pretrained(out, safe_serialization=True)
    model.generation_config.save_pretrained(out)
    (out / "llm_compare_tiny.json").write_text(json.dumps(
        {"version": TINY_VERSION, "vocab": vocab, "tokenizer_corpus": f"{len(files)} stdlib .py files"}))


def tokenizer_files() -> list[str]:
    """The tokenizer's training text: the top-level .py files of this interpreter's stdlib."""
    stdlib = sysconfig.get_paths()["stdlib"]
    return sorted(glob.glob(os.path.join(stdlib, "*.py")))[:200]


def build_tokenizer(out: Path, vocab: int = 4096) -> tuple[Any, list[str]]:
    """Train the byte-level BPE tokenizer and save it into ``out``: (HF tokenizer, corpus files).
    Shared by the random-weight model and the trained one (backends/models/train.py)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    files = tokenizer_files()
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab - len(SPECIAL), min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train(files, trainer)
    tok.add_special_tokens(SPECIAL)

    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=None, eos_token="<|im_end|>",
                                     pad_token="<|endoftext|>", unk_token=None, model_max_length=2048)
    hf_tok.chat_template = CHAT_TEMPLATE
    hf_tok.save_pretrained(out)
    # older transformers (4.x, inside TGI / TRT-LLM images) need the classic fields
    tc_path = out / "tokenizer_config.json"
    tc = json.loads(tc_path.read_text())
    tc["tokenizer_class"] = "PreTrainedTokenizerFast"
    tc["chat_template"] = CHAT_TEMPLATE
    tc_path.write_text(json.dumps(tc, indent=2))
    return hf_tok, files


def tiny_config(hf_tok: Any, vocab: int = 4096, **shape: int) -> Any:
    """The one Qwen2 shape of the tiny models (random and trained); ``shape`` overrides its sizes
    (a larger trained model, backends/models/train.py SHAPES)."""
    from transformers import Qwen2Config

    sizes = {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
             "num_key_value_heads": 2, "head_dim": 32, **shape}
    return Qwen2Config(
        vocab_size=vocab, **sizes, max_position_embeddings=2048,
        rope_theta=10000.0, tie_word_embeddings=True,
        bos_token_id=hf_tok.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=hf_tok.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=hf_tok.convert_tokens_to_ids("<|endoftext|>"),
    )
