"""llama.cpp's quantization quality on a trained model, measured by llama.cpp's own tool: the GGUFs
the llamacpp backend serves (F32, BF16, Q8_0, Q4_K_M, made by its preparation: the pinned
converter and ``llama-quantize``), scored on the model's held-out text by ``llama-perplexity`` on
the GPU (all layers offloaded). F32 writes the base logits; every other type is compared with them
(``--kl-divergence``): perplexity ratio, mean KL divergence, same-top-token rate. Beside them the
float32 transformers reference scores the same chunks, so llama.cpp's F32 is tied back to the
reference the vLLM rows of ``compare quant quality`` use.

llama-server exposes no prompt log-probs (its ``n_probs`` covers generated tokens only), so the
teacher-forced rows of ``compare quant quality`` cannot come from it; llama-perplexity is the
llama.cpp project's own quality measure. Its chunking: ``--ctx`` tokens a chunk, the second half
of each chunk scored (the first half is context), no BOS for this model (Qwen2 adds none).

    python3 benchmarks/gpu/llamacpp_quality.py --model DIR --bin DIR [--ctx 512] [--chunks 32] --out FILE
"""
from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
import time
from pathlib import Path

TYPES = ("bf16", "Q8_0", "Q4_K_M")
FIELDS = {  # llama-perplexity's KL-divergence summary lines (tools/perplexity/perplexity.cpp, b11434)
    "ppl": r"Mean PPL\(Q\)\s*:\s*([\d.]+)",
    "ppl_base": r"Mean PPL\(base\)\s*:\s*([\d.]+)",
    "ppl_ratio": r"Mean PPL\(Q\)/PPL\(base\)\s*:\s*([\d.]+)",
    "kl_mean": r"Mean\s+KLD:\s*([\d.eE+-]+)",
    "kl_p99": r"99\.0%\s+KLD:\s*([\d.eE+-]+)",
    "same_top_pct": r"Same top p:\s*([\d.]+)",
}


def parse_kld(text: str) -> dict[str, float]:
    out = {}
    for k, rx in FIELDS.items():
        m = re.search(rx, text)
        if m:
            out[k] = float(m.group(1))
    return out


def parse_ppl(text: str) -> float | None:
    m = re.search(r"Final estimate: PPL = ([\d.]+)", text)
    return float(m.group(1)) if m else None


def _run(argv: list[str], log: Path) -> str:
    t0 = time.time()
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    text = r.stdout + r.stderr
    log.write_text(f"$ {' '.join(argv)}\n(exit {r.returncode}, {time.time() - t0:.1f} s)\n{text}")
    if r.returncode != 0:
        raise RuntimeError(f"{Path(argv[0]).name} exit {r.returncode}: {text.strip().splitlines()[-1:]}")
    return text


def reference_ppl(model: Path, text: str, ctx: int, chunks: int) -> dict[str, float]:
    """transformers float32 on the same chunks, scored as llama-perplexity scores them."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model))
    ids = tok(text, verbose=False)["input_ids"]
    m = AutoModelForCausalLM.from_pretrained(str(model), dtype=torch.float32).to("cuda").eval()
    torch.backends.cuda.matmul.allow_tf32 = False
    n = min(chunks, len(ids) // ctx)
    nll, count = 0.0, 0
    with torch.no_grad():
        for c in range(n):
            x = torch.tensor([ids[c * ctx:(c + 1) * ctx]], device="cuda")
            logp = torch.log_softmax(m(input_ids=x).logits[0].double(), dim=-1)
            first = ctx // 2
            tgt = x[0, first:]
            nll -= float(logp[first - 1:ctx - 1].gather(1, tgt[:, None]).sum())
            count += ctx - first
    return {"tokens": len(ids), "chunks": n, "scored": count, "ppl": math.exp(nll / count)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, required=True, help="the trained model (safetensors, float32)")
    ap.add_argument("--bin", type=Path, required=True, help="directory of llama-perplexity and llama-quantize")
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=32)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    from backends.llamacpp.gguf import prepare_gguf
    from backends.models.corpus import heldout_files_of
    from backends.models.train import provenance

    work = a.out.parent / "llamacpp-quality"
    work.mkdir(parents=True, exist_ok=True)
    files = heldout_files_of(provenance(a.model))
    text = "\n\n".join(Path(f).read_text(encoding="utf-8", errors="replace") for f in files)
    (work / "heldout.txt").write_text(text, encoding="utf-8")
    say = lambda s: print(f"LQ {s}", file=sys.stderr, flush=True)  # noqa: E731
    res: dict = {"model": str(a.model), "model_provenance": {k: v for k, v in provenance(a.model).items()
                                                              if k != "corpus"},
                 "heldout_files": len(files), "ctx": a.ctx, "chunks": a.chunks, "rows": []}
    t0 = time.time()
    base, hit = prepare_gguf(str(a.model), "f32", log=say)
    res["gguf"] = {"f32": {"path": str(base.path), "cache_hit": hit, "s": round(time.time() - t0, 1)}}
    ppl = [str(a.bin / "llama-perplexity"), "-c", str(a.ctx), "--chunks", str(a.chunks), "-ngl", "99", "-b", str(a.ctx)]
    kld = work / "f32.kld"
    out = _run([*ppl, "-m", str(base.path / "model.gguf"), "-f", str(work / "heldout.txt"),
                "--kl-divergence-base", str(kld)], work / "f32.log")
    res["rows"].append({"type": "F32", "ppl": parse_ppl(out), "status": "measured", "base": True})
    say(f"F32 ppl {res['rows'][-1]['ppl']}")
    for t in TYPES:
        t1 = time.time()
        try:
            e, hit = (prepare_gguf(str(a.model), t, log=say) if t == "bf16" else
                      prepare_gguf(str(a.model), t, a.bin / "llama-quantize", log=say, base_type="f32"))
            res["gguf"][t] = {"path": str(e.path), "cache_hit": hit, "s": round(time.time() - t1, 1),
                              "bytes": (e.path / "model.gguf").stat().st_size}
            out = _run([*ppl, "-m", str(e.path / "model.gguf"), "--kl-divergence-base", str(kld), "--kl-divergence"],
                       work / f"{t}.log")
            res["rows"].append({"type": t.upper(), "status": "measured", **parse_kld(out)})
        except Exception as ex:  # one type failing keeps the others
            res["rows"].append({"type": t.upper(), "status": "failed", "reason": f"{type(ex).__name__}: {ex}"[:400]})
        say(f"{t}: {res['rows'][-1]}")
    try:
        res["reference"] = {"engine": "transformers float32 (CUDA, TF32 off)",
                            **reference_ppl(a.model, text, a.ctx, a.chunks)}
    except Exception as ex:
        res["reference"] = {"status": "failed", "reason": f"{type(ex).__name__}: {ex}"[:400]}
    a.out.write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps(res["rows"], indent=1))
    print("reference", json.dumps(res.get("reference")))
    return 0 if all(r["status"] == "measured" for r in res["rows"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
