"""Write real checkpoints of a model architecture on a GPU machine: random weights in the model's
exact layout, saved as safetensors the way a user's checkpoint is, so engines load them for real
(no ``--load-format dummy``). Valid for speed and for engine-vs-reference parity (every engine
and the reference read the same weights); meaningless as a language model.

    python3 benchmarks/gpu/materialize.py --config benchmarks/gpu/qwen2.5-7b-config.json \
        --tokenizer DIR --out /tmp/ck [--fp8 /tmp/ck-fp8] [--w4a16 /tmp/ck-w4a16] [--seed 0]

* ``--out``: the bf16 checkpoint (transformers ``from_config`` on the GPU, seeded, then
  ``save_pretrained``), the tokenizer files beside it. The same seed, code and machine image give
  the same weights: ``weights_sha256`` in ``materialize.json`` proves it across machines.
* ``--fp8``: the same weights quantized to FP8 (E4M3) per tensor, as vLLM's
  ``quant_method: fp8`` serialized format expects (``weight`` in float8_e4m3fn and a float32
  ``weight_scale`` per linear layer, activations quantized dynamically; embeddings, norms and
  lm_head stay bf16), with ``llm_compare_quant.json`` naming the bf16 checkpoint as its source, so
  quality parity uses the bf16 weights in float32 as the reference.
* ``--w4a16``: the same weights as 4-bit integers, group 128, symmetric, round to nearest: the
  compressed-tensors ``pack-quantized`` checkpoint llmcompressor's data-free ``QuantizationModifier``
  W4A16 preset writes (int32 ``weight_packed``, bf16 ``weight_scale`` per group, ``weight_shape``;
  the same scale and rounding; checked bit for bit against llmcompressor on the tiny model by
  tests/benchmarks/test_materialize.py). vLLM serves it with its Machete / Marlin mixed-input GEMM.
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
    return _finish(src, out, cfg, "w8a8-fp8", "per-tensor FP8 (E4M3) weights, dynamic activations", t0)


def _finish(src: Path, out: Path, cfg: dict, scheme: str, method: str, t0: float) -> dict:
    """config.json, the source's other files (tokenizer, generation config), the provenance the
    quality reference follows back to the bf16 source; what was written."""
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    for f in src.iterdir():
        if f.is_file() and not f.name.endswith(".safetensors") and f.name not in (
                "config.json", "model.safetensors.index.json", "materialize.json"):
            shutil.copy(f, out / f.name)
    prov = {"scheme": scheme, "source": str(src.resolve()), "method": f"{method} (benchmarks/gpu/materialize.py)"}
    (out / "llm_compare_quant.json").write_text(json.dumps(prov, indent=2) + "\n")
    shards = sorted(out.glob("*.safetensors"))
    return {"out": str(out), "wall_s": round(time.time() - t0, 1), "bytes": sum(f.stat().st_size for f in shards)}


W4_GROUP = 128


def pack_int4(q):  # (out, in) int8 in [-8, 7] -> (out, in/8) int32, compressed-tensors' pack_to_int32
    import torch

    u = (q.to(torch.int32) + 8).view(q.shape[0], -1, 8)
    shifts = torch.arange(8, device=q.device, dtype=torch.int32) * 4
    return (u << shifts).sum(dim=2, dtype=torch.int32)


def rtn_w4(w):
    """(packed int32, bf16 scale per group of 128) of one weight, as compressed-tensors' minmax
    observer and quantizer compute them: scale = absmax / 7.5 (the int4 range's half-width), rounded
    to the weight's dtype, q = clamp(round(w / scale), -8, 7) with the division in bf16."""
    import torch

    out_f, in_f = w.shape
    g = w.to(torch.bfloat16).view(out_f, in_f // W4_GROUP, W4_GROUP)
    lo, hi = g.amin(dim=2).clamp(max=0), g.amax(dim=2).clamp(min=0)
    absmax = torch.maximum(lo.abs(), hi).float()
    scale = (absmax / 7.5).to(torch.bfloat16)
    scale = torch.where(scale == 0, torch.ones_like(scale), scale)
    # the division in the weight's dtype, as compressed-tensors' quantizer does (x / scale in bf16)
    q = torch.clamp(torch.round(g / scale.unsqueeze(2)), -8, 7).to(torch.int8)
    return pack_int4(q.view(out_f, in_f)), scale


def _rewrite_linears(src: Path, out: Path, device: str, quantize) -> None:
    """Every shard of ``src`` written to ``out`` with each decoder-layer linear weight replaced by
    ``quantize(name, w)`` (a dict of tensors, or None to keep it); everything else in bf16."""
    import torch
    from safetensors.torch import load_file, save_file

    out.mkdir(parents=True, exist_ok=True)
    index = {"metadata": {}, "weight_map": {}}
    for shard in sorted(src.glob("*.safetensors")):
        tensors = load_file(shard, device=device)
        q: dict[str, torch.Tensor] = {}
        for name, w in tensors.items():
            got = quantize(name, w) if ".layers." in name and name.endswith("proj.weight") and w.dim() == 2 else None
            if got is not None:
                q.update(got)
            else:
                q[name] = w.to(torch.bfloat16) if w.is_floating_point() else w
        q = {k: v.contiguous().cpu() for k, v in q.items()}
        save_file(q, out / shard.name, metadata={"format": "pt"})
        index["weight_map"].update({k: shard.name for k in q})
        del tensors, q
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))


def _compressed_tensors(fmt: str, weights: dict, input_activations: dict | None) -> dict:
    """The ``quantization_config`` llmcompressor writes for one config group over every Linear but lm_head."""
    return {
        "config_groups": {"group_0": {"format": fmt, "input_activations": input_activations, "output_activations": None,
                                      "targets": ["Linear"], "weights": weights}},
        "format": fmt, "global_compression_ratio": None, "ignore": ["lm_head"], "kv_cache_scheme": None,
        "quant_method": "compressed-tensors", "quantization_status": "compressed", "sparsity_config": {},
        "transform_config": {}}


def to_w4a16(src: Path, out: Path, device: str = "cuda") -> dict:
    """compressed-tensors W4A16 (group 128, symmetric, round to nearest) of every linear weight of
    the decoder layers; embeddings, norms and lm_head stay bf16."""
    import torch

    def w4(name, w):
        if w.shape[1] % W4_GROUP:
            return None
        stem = name.removesuffix("weight")
        packed, scale = rtn_w4(w)
        return {stem + "weight_packed": packed, stem + "weight_scale": scale,
                stem + "weight_shape": torch.tensor(list(w.shape), dtype=torch.int64)}

    t0 = time.time()
    _rewrite_linears(src, out, device, w4)
    cfg = json.loads((src / "config.json").read_text())
    weights = {"actorder": None, "block_structure": None, "dynamic": False, "group_size": W4_GROUP, "num_bits": 4,
               "observer": "memoryless_minmax", "observer_kwargs": {}, "scale_dtype": None, "strategy": "group",
               "symmetric": True, "type": "int", "zp_dtype": None}
    cfg["quantization_config"] = _compressed_tensors("pack-quantized", weights, None)
    cfg["torch_dtype"] = cfg["dtype"] = "bfloat16"
    return _finish(src, out, cfg, "w4a16", "int4 weights, group 128, symmetric, round to nearest", t0)


def rtn_w8(w):
    """(int8 weight, bf16 scale per output channel) of one weight, as compressed-tensors' minmax
    observer and quantizer compute them for llmcompressor's W8A8 preset: scale = absmax / 127.5
    (the int8 range's half-width), rounded to the weight's dtype, q = clamp(round(w / scale), -128,
    127) with the division in bf16."""
    import torch

    g = w.to(torch.bfloat16)
    lo, hi = g.amin(dim=1, keepdim=True).clamp(max=0), g.amax(dim=1, keepdim=True).clamp(min=0)
    scale = (torch.maximum(lo.abs(), hi).float() / 127.5).to(torch.bfloat16)
    scale = torch.where(scale == 0, torch.ones_like(scale), scale)
    return torch.clamp(torch.round(g / scale), -128, 127).to(torch.int8), scale


def to_w8a8_int8(src: Path, out: Path, device: str = "cuda") -> dict:
    """compressed-tensors W8A8-int8 of every linear weight of the decoder layers: int8 weights with
    one scale per output channel (symmetric, round to nearest), activations quantized per token at
    run time; embeddings, norms and lm_head stay bf16 (llmcompressor's data-free W8A8 preset)."""
    def w8(name, w):
        q, scale = rtn_w8(w)
        return {name: q, name.removesuffix("weight") + "weight_scale": scale}

    t0 = time.time()
    _rewrite_linears(src, out, device, w8)
    cfg = json.loads((src / "config.json").read_text())
    common = {"actorder": None, "block_structure": None, "group_size": None, "num_bits": 8, "observer_kwargs": {},
              "scale_dtype": None, "symmetric": True, "type": "int", "zp_dtype": None}
    weights = {**common, "dynamic": False, "observer": "memoryless_minmax", "strategy": "channel"}
    acts = {**common, "dynamic": True, "observer": None, "strategy": "token"}
    cfg["quantization_config"] = _compressed_tensors("int-quantized", weights, acts)
    cfg["torch_dtype"] = cfg["dtype"] = "bfloat16"
    return _finish(src, out, cfg, "w8a8-int8", "int8 weights per output channel, symmetric, round to nearest; "
                   "int8 activations per token at run time", t0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, required=True, help="the architecture's config.json")
    ap.add_argument("--tokenizer", type=Path, help="directory of tokenizer files copied beside the weights")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--fp8", type=Path, help="also write the FP8 checkpoint here")
    ap.add_argument("--w4a16", type=Path, help="also write the W4A16 (group 128, round to nearest) checkpoint here")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    info = {"bf16": materialize(args.config, args.tokenizer, args.out, args.seed)}
    if args.fp8:
        info["fp8"] = to_fp8(args.out, args.fp8)
    if args.w4a16:
        info["w4a16"] = to_w4a16(args.out, args.w4a16)
    (args.out / "materialize.json").write_text(json.dumps(info, indent=2) + "\n")
    print(json.dumps(info, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
