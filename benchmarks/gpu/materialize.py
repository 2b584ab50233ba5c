"""Write real checkpoints of a model architecture on a GPU machine: random weights in the model's
exact layout, saved as safetensors the way a user's checkpoint is, so engines load them for real
(no ``--load-format dummy``). Valid for speed and for engine-vs-reference parity (every engine
and the reference read the same weights); meaningless as a language model.

    python3 benchmarks/gpu/materialize.py --config benchmarks/gpu/qwen2.5-7b-config.json \
        --tokenizer DIR --out /tmp/ck [--fp8 /tmp/ck-fp8] [--seed 0]

* ``--out``: the bf16 checkpoint (transformers ``from_config`` on the GPU, seeded, then
  ``save_pretrained``), the tokenizer files beside it. The same seed, code and machine image give
  the same weights: ``weights_sha256`` in ``materialize.json`` proves it across machines.
* ``--fp8``: the same weights quantized to FP8 (E4M3) per tensor, as vLLM's
  ``quant_method: fp8`` serialized format expects (``weight`` in float8_e4m3fn and a float32
  ``weight_scale`` per linear layer, activations quantized dynamically; embeddings, norms and
  lm_head stay bf16), with ``llm_compare_quant.json`` naming the bf16 checkpoint as its source, so
  quality parity uses the bf16 weights in float32 as the reference.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import time
from pathlib import Path

FP8_MAX = 448.0  # largest finite float8_e4m3fn


def _sha(files: list[Path]) -> str:
    h = hashlib.sha256()
    for f in files:
        with f.open("rb") as fh:
            while chunk := fh.read(1 << 24):
                h.update(chunk)
    return h.hexdigest()


def materialize(config: Path, tokenizer: Path | None, out: Path, seed: int) -> dict:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    t0 = time.time()
    cfg = AutoConfig.from_pretrained(config.parent if config.name == "config.json" else _config_dir(config))
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    t_init = time.time() - t0
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True, max_shard_size="5GB")
    del model
    torch.cuda.empty_cache()
    if tokenizer is not None:
        for f in tokenizer.iterdir():
            if f.name != "config.json" and f.is_file():
                shutil.copy(f, out / f.name)
    shards = sorted(out.glob("*.safetensors"))
    return {"out": str(out), "seed": seed, "init_s": round(t_init, 1), "wall_s": round(time.time() - t0, 1),
            "bytes": sum(f.stat().st_size for f in shards), "weights_sha256": _sha(shards),
            "torch": torch.__version__}


def _config_dir(config: Path) -> Path:
    d = Path("/tmp/materialize-config")
    d.mkdir(parents=True, exist_ok=True)
    shutil.copy(config, d / "config.json")
    return d


def to_fp8(src: Path, out: Path) -> dict:
    """Per-tensor FP8 of every linear weight of the decoder layers (vLLM's serialized fp8 format)."""
    import torch
    from safetensors.torch import load_file, save_file

    t0 = time.time()
    out.mkdir(parents=True, exist_ok=True)
    index = {"metadata": {}, "weight_map": {}}
    for shard in sorted(src.glob("*.safetensors")):
        tensors = load_file(shard, device="cuda")
        q: dict[str, torch.Tensor] = {}
        for name, w in tensors.items():
            if ".layers." in name and name.endswith("proj.weight") and w.dim() == 2:
                scale = (w.abs().amax().float() / FP8_MAX).clamp(min=1e-12)
                q[name] = (w.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).contiguous()
                q[name.removesuffix("weight") + "weight_scale"] = scale.reshape(()).cpu().float()
            else:
                q[name] = w
        q = {k: v.cpu() for k, v in q.items()}
        save_file(q, out / shard.name, metadata={"format": "pt"})
        index["weight_map"].update({k: shard.name for k in q})
        del tensors, q
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    cfg = json.loads((src / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "dynamic",
                                  "ignored_layers": ["lm_head"]}
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    for f in src.iterdir():
        if f.is_file() and not f.name.endswith(".safetensors") and f.name not in (
                "config.json", "model.safetensors.index.json"):
            shutil.copy(f, out / f.name)
    prov = {"scheme": "w8a8-fp8", "source": str(src.resolve()),
            "method": "per-tensor FP8 (E4M3) weights, dynamic activations (benchmarks/gpu/materialize.py)"}
    (out / "llm_compare_quant.json").write_text(json.dumps(prov, indent=2) + "\n")
    shards = sorted(out.glob("*.safetensors"))
    return {"out": str(out), "wall_s": round(time.time() - t0, 1), "bytes": sum(f.stat().st_size for f in shards)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, required=True, help="the architecture's config.json")
    ap.add_argument("--tokenizer", type=Path, help="directory of tokenizer files copied beside the weights")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--fp8", type=Path, help="also write the FP8 checkpoint here")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    info = {"bf16": materialize(args.config, args.tokenizer, args.out, args.seed)}
    if args.fp8:
        info["fp8"] = to_fp8(args.out, args.fp8)
    (args.out / "materialize.json").write_text(json.dumps(info, indent=2) + "\n")
    print(json.dumps(info, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
