"""A TRAINED model of the tiny models' Qwen2 architecture, so that its logits carry information and
quantization costs measured on it mean something (the random-weight model's nearly flat logits do
not). Two sizes from one trainer:

* the trained tiny model (the default): the tiny shape and tokenizer (backends/models/tiny.py),
  trained on CPU on the standard library's top-level sources (corpus ``stdlib``), minutes on 2
  cores; built once into the cache (``models/qwen2-tiny-trained-v1``);
* ``--shape small``: the same tokenizer, 16 layers of width 1024 (~190 M parameters), trained on a
  GPU in bf16 autocast on every Python source of the machine (corpus ``python``), minutes on an
  H200: the model GPU quantization quality is measured on.

Deterministic: fixed seeds, a fixed torch thread count, a fixed number of steps (a GPU run may
also stop at ``max_seconds``: the provenance then says how many steps ran), batches drawn from a
seeded generator; the held-out split is backends/models/corpus.py's. Built atomically, with
``llm_compare_tiny.json`` recording the corpus, the held-out files, steps, seed, the loss curve's
ends and the held-out perplexity.
"""
from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from backends.models.corpus import HELDOUT_MODULUS, corpus_split, heldout_files_of, token_stream, windows_of
from backends.models.tiny import build_atomically, build_tokenizer, cache_root, tiny_config

TRAINED_VERSION = "qwen2-tiny-trained-v1"
# model shapes beside the tiny one (tiny.py's tiny_config): the Qwen2 fields they override
SHAPES: dict[str, dict[str, int]] = {
    "tiny": {},
    "small": {"hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 16, "num_attention_heads": 16,
              "num_key_value_heads": 8, "head_dim": 64},
}


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 400
    batch: int = 16
    seq_len: int = 128
    lr: float = 3e-3
    warmup: int = 30
    weight_decay: float = 0.1
    seed: int = 0
    # one thread: deterministic (a different count can change float summation order), and on a
    # busy 2-core machine two spinning OpenMP threads train at half the speed of one
    threads: int = 1
    eval_windows: int = 48
    eval_len: int = 256
    shape: str = "tiny"  # SHAPES
    corpus: str = "stdlib"  # backends/models/corpus.py CORPORA
    corpus_bytes: int = 0  # the python corpus's byte budget (0: every file)
    device: str = "cpu"  # "cuda": bf16 autocast, float32 master weights
    max_seconds: float = 0.0  # stop training early past this many seconds (0: never)


def default_trained_dir() -> Path:
    return cache_root() / "models" / TRAINED_VERSION


def heldout_windows(tok: Any, windows: int, length: int, model_dir: Path | None = None) -> list[list[int]]:
    """Consecutive non-overlapping ``length``-token windows of a trained model's held-out text (at
    most ``windows``): the text every engine's perplexity is measured on. The files are the ones the
    model's provenance names (the ``stdlib`` split when there is no model or it names none)."""
    return windows_of(tok, heldout_files_of(provenance(model_dir) if model_dir else {}), windows, length)


def ensure_trained_model(out: Path | None = None, cfg: TrainConfig = TrainConfig(),
                         log: Callable[[str], None] | None = None) -> Path:
    """Build once (minutes on 2 cores); later calls return the cached directory."""
    return build_atomically(Path(out) if out else default_trained_dir(), lambda tmp: _train(tmp, cfg, log))


def _train(out: Path, cfg: TrainConfig, log: Callable[[str], None] | None) -> None:
    import torch
    from transformers import Qwen2ForCausalLM

    prev_threads = torch.get_num_threads()
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    try:
        tok, _ = build_tokenizer(out)
        train_files, held_files = corpus_split(cfg.corpus, cfg.corpus_bytes)
        data = torch.tensor(token_stream(tok, train_files), dtype=torch.long)
        config = tiny_config(tok, **SHAPES[cfg.shape])
        dev = torch.device(cfg.device)
        if dev.type == "cuda":
            torch.cuda.manual_seed_all(cfg.seed)
        model = Qwen2ForCausalLM(config).to(torch.float32).to(dev)  # the default (0.02) init
        model.train()
        data_dev = data.to(dev)
        decay = [p for p in model.parameters() if p.dim() >= 2]
        no_decay = [p for p in model.parameters() if p.dim() < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                                 {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.95),
                                **({"fused": True} if dev.type == "cuda" else {}))
        gen = torch.Generator().manual_seed(cfg.seed)
        losses: list[float] = []
        t0 = time.monotonic()
        steps_run = 0
        for step in range(cfg.steps):
            if cfg.max_seconds and time.monotonic() - t0 > cfg.max_seconds:
                break
            lr = cfg.lr * min(1.0, (step + 1) / cfg.warmup) * 0.5 * (1 + math.cos(math.pi * step / cfg.steps))
            for g in opt.param_groups:
                g["lr"] = max(lr, cfg.lr * 0.02)
            starts = torch.randint(0, len(data) - cfg.seq_len - 1, (cfg.batch,), generator=gen)
            x = torch.stack([data_dev[s:s + cfg.seq_len] for s in starts.tolist()])
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
                loss = model(input_ids=x, labels=x).loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            steps_run += 1
            # one device sync per logged step, not per step (loss.item() waits for the GPU)
            if step < 5 or step % 10 == 0 or step >= cfg.steps - 20:
                losses.append(loss.item())
            if log and (step % 50 == 0 or step == cfg.steps - 1):
                log(f"step {step + 1}/{cfg.steps} loss {loss.item():.3f} ({time.monotonic() - t0:.0f} s)")
        seconds = time.monotonic() - t0
        model.eval()
        nll = heldout_nll(model, windows_of(tok, held_files, cfg.eval_windows, cfg.eval_len))
        model = model.cpu()
        model.save_pretrained(out, safe_serialization=True)
        model.generation_config.save_pretrained(out)
        tail = losses[-20:]
        (out / "llm_compare_tiny.json").write_text(json.dumps({
            "version": TRAINED_VERSION if cfg.shape == "tiny" else f"qwen2-{cfg.shape}-trained-v1", "trained": True, "vocab": tok.vocab_size + len(tok.added_tokens_decoder),
            "corpus": _corpus_record(cfg, train_files, held_files, len(data)),
            "shape": {k: getattr(config, k) for k in ("hidden_size", "intermediate_size", "num_hidden_layers",
                                                       "num_attention_heads", "num_key_value_heads", "head_dim")},
            "parameters": sum(p.numel() for p in model.parameters()),
            "train": {**asdict(cfg), "steps_run": steps_run, "seconds": round(seconds, 1), "torch": torch.__version__,
                      "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
                      "tokens_seen": steps_run * cfg.batch * cfg.seq_len,
                      "initial_loss": round(sum(losses[:5]) / len(losses[:5]), 4),
                      "final_train_loss": round(sum(tail) / len(tail), 4)},
            "heldout": {"windows": cfg.eval_windows, "window_tokens": cfg.eval_len,
                        "nll": round(nll, 4), "perplexity": round(math.exp(nll), 3)},
        }, indent=2))
    finally:
        torch.set_num_threads(prev_threads)


def _corpus_record(cfg: TrainConfig, train_files: list[str], held_files: list[str], tokens: int) -> dict[str, Any]:
    if cfg.corpus == "stdlib":
        return {"name": "stdlib", "what": "top-level .py files of the Python standard library (sysconfig stdlib)",
                "train_files": len(train_files), "train_tokens": tokens,
                "heldout_rule": f"sha256(file name) % {HELDOUT_MODULUS} == 0",
                "heldout_files": [os.path.basename(f) for f in held_files]}
    return {"name": cfg.corpus, "what": "every .py file of the standard library and site-packages of the "
                                        "interpreter that trained it (backends/models/corpus.py)",
            "max_bytes": cfg.corpus_bytes, "train_files": len(train_files), "train_tokens": tokens,
            "train_bytes": sum(os.path.getsize(f) for f in train_files),
            "heldout_rule": f"sha256(path relative to its root) % {HELDOUT_MODULUS} == 0",
            "heldout_files": len(held_files), "heldout_paths": held_files}


def heldout_nll(model: Any, windows: list[list[int]]) -> float:
    """Mean next-token negative log-likelihood of a transformers model over the windows."""
    import torch

    total, n = 0.0, 0
    with torch.no_grad():
        for w in windows:
            x = torch.tensor([w], dtype=torch.long, device=next(model.parameters()).device)
            logp = torch.log_softmax(model(input_ids=x).logits[0, :-1].float(), dim=-1)
            total += -float(logp.gather(1, x[0, 1:, None]).sum())
            n += len(w) - 1
    return total / max(1, n)


def provenance(model_dir: Path) -> dict[str, Any]:
    p = Path(model_dir) / "llm_compare_tiny.json"
    return json.loads(p.read_text()) if p.is_file() else {}


def main(argv: list[str] | None = None) -> int:
    """python -m backends.models.train [OUT] [--shape small --corpus python --device cuda ...]"""
    import argparse
    import sys

    ap = argparse.ArgumentParser(prog="python -m backends.models.train", description=main.__doc__)
    ap.add_argument("out", nargs="?", type=Path, default=None, help="default: the cached trained tiny model")
    d = TrainConfig()
    for f, v in asdict(d).items():
        ap.add_argument("--" + f.replace("_", "-"), type=type(v), default=v)
    a = vars(ap.parse_args(argv))
    out = a.pop("out")
    cfg = TrainConfig(**a)
    if cfg.shape not in SHAPES:
        ap.error(f"--shape {cfg.shape}: one of {', '.join(SHAPES)}")
    if cfg != d and out is None:
        ap.error("a non-default training needs an output directory (the cache holds the default one)")
    print(ensure_trained_model(out, cfg, log=lambda s: print(s, file=sys.stderr, flush=True)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
