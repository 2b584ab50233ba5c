"""A TRAINED tiny model: the tiny Qwen2 shape and tokenizer (backends/models/tiny.py), trained on
this interpreter's standard-library sources so that its logits carry information and quantization
costs measured on it mean something (the random-weight model's nearly flat logits do not).

Deterministic: fixed seeds, a fixed torch thread count, a fixed number of steps, batches drawn
from a seeded generator; the corpus is the top-level stdlib ``*.py`` files, split by a hash of the
file name into train (~95%) and held-out (~5%). Built once into the cache
(``models/qwen2-tiny-trained-v1``), atomically, with ``llm_compare_tiny.json`` recording the corpus,
the held-out files, steps, seed, the loss curve's ends and the held-out perplexity.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from backends.models.tiny import build_atomically, build_tokenizer, cache_root, tiny_config, tokenizer_files

TRAINED_VERSION = "qwen2-tiny-trained-v1"
HELDOUT_MODULUS = 20  # a file is held out when sha256(name) % 20 == 0: ~5% of the files


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


def default_trained_dir() -> Path:
    return cache_root() / "models" / TRAINED_VERSION


def is_heldout(path: str) -> bool:
    return int(hashlib.sha256(os.path.basename(path).encode()).hexdigest()[:8], 16) % HELDOUT_MODULUS == 0


def corpus_split() -> tuple[list[str], list[str]]:
    """(train files, held-out files), both sorted."""
    files = tokenizer_files()
    return [f for f in files if not is_heldout(f)], [f for f in files if is_heldout(f)]


def _stream(tok: Any, files: list[str]) -> list[int]:
    """The files' tokens, one document after another, separated by <|endoftext|>."""
    eot = tok.convert_tokens_to_ids("<|endoftext|>")
    ids: list[int] = []
    for f in files:
        with open(f, encoding="utf-8", errors="replace") as fh:
            ids += tok(fh.read(), verbose=False)["input_ids"] + [eot]
    return ids


def heldout_windows(tok: Any, windows: int, length: int) -> list[list[int]]:
    """Consecutive non-overlapping ``length``-token windows of the held-out text (at most
    ``windows``): the text every engine's perplexity is measured on."""
    ids = _stream(tok, corpus_split()[1])
    return [ids[i:i + length] for i in range(0, len(ids) - length + 1, length)][:windows]


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
        train_files, held_files = corpus_split()
        data = torch.tensor(_stream(tok, train_files), dtype=torch.long)
        model = Qwen2ForCausalLM(tiny_config(tok)).to(torch.float32)  # the default (0.02) init
        model.train()
        decay = [p for p in model.parameters() if p.dim() >= 2]
        no_decay = [p for p in model.parameters() if p.dim() < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                                 {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.95))
        gen = torch.Generator().manual_seed(cfg.seed)
        losses: list[float] = []
        t0 = time.monotonic()
        for step in range(cfg.steps):
            lr = cfg.lr * min(1.0, (step + 1) / cfg.warmup) * 0.5 * (1 + math.cos(math.pi * step / cfg.steps))
            for g in opt.param_groups:
                g["lr"] = max(lr, cfg.lr * 0.02)
            starts = torch.randint(0, len(data) - cfg.seq_len - 1, (cfg.batch,), generator=gen)
            x = torch.stack([data[s:s + cfg.seq_len] for s in starts.tolist()])
            loss = model(input_ids=x, labels=x).loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            losses.append(loss.item())
            if log and (step % 50 == 0 or step == cfg.steps - 1):
                log(f"step {step + 1}/{cfg.steps} loss {losses[-1]:.3f} ({time.monotonic() - t0:.0f} s)")
        seconds = time.monotonic() - t0
        model.eval()
        nll = heldout_nll(model, heldout_windows(tok, cfg.eval_windows, cfg.eval_len))
        model.save_pretrained(out, safe_serialization=True)
        model.generation_config.save_pretrained(out)
        tail = losses[-20:]
        (out / "llm_compare_tiny.json").write_text(json.dumps({
            "version": TRAINED_VERSION, "trained": True, "vocab": tok.vocab_size + len(tok.added_tokens_decoder),
            "corpus": {"what": "top-level .py files of the Python standard library (sysconfig stdlib)",
                       "train_files": len(train_files), "train_tokens": len(data),
                       "heldout_rule": f"sha256(file name) % {HELDOUT_MODULUS} == 0",
                       "heldout_files": [os.path.basename(f) for f in held_files]},
            "train": {**asdict(cfg), "seconds": round(seconds, 1), "torch": torch.__version__,
                      "initial_loss": round(sum(losses[:5]) / len(losses[:5]), 4),
                      "final_train_loss": round(sum(tail) / len(tail), 4)},
            "heldout": {"windows": cfg.eval_windows, "window_tokens": cfg.eval_len,
                        "nll": round(nll, 4), "perplexity": round(math.exp(nll), 3)},
        }, indent=2))
    finally:
        torch.set_num_threads(prev_threads)


def heldout_nll(model: Any, windows: list[list[int]]) -> float:
    """Mean next-token negative log-likelihood of a transformers model over the windows."""
    import torch

    total, n = 0.0, 0
    with torch.no_grad():
        for w in windows:
            x = torch.tensor([w], dtype=torch.long)
            logp = torch.log_softmax(model(input_ids=x).logits[0, :-1].float(), dim=-1)
            total += -float(logp.gather(1, x[0, 1:, None]).sum())
            n += len(w) - 1
    return total / max(1, n)


def provenance(model_dir: Path) -> dict[str, Any]:
    p = Path(model_dir) / "llm_compare_tiny.json"
    return json.loads(p.read_text()) if p.is_file() else {}


if __name__ == "__main__":  # python -m backends.models.train [OUT]
    import sys

    d = ensure_trained_model(Path(sys.argv[1]) if len(sys.argv) > 1 else None,
                             log=lambda s: print(s, file=sys.stderr, flush=True))
    print(d)
