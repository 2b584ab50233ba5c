"""Roofline floors for a dense decoder-only transformer, from its HF ``config.json``.

Pure arithmetic, no framework import. Two ceilings, both *measured* on the machine (not the
datasheet's): ``bandwidth`` (bytes/s of a large device-to-device copy, read + write counted) and
``flops`` (FLOP/s of a large matrix product in the serving dtype). A step's floor is
``max(bytes / bandwidth, flops / flops_per_s)``: no kernel can move its bytes faster than the
copy did, nor do its matrix work faster than the big GEMM did.

What one engine step must touch:
- decode (one new token for each of B sequences): every weight once (the embedding table only
  for the B rows it gathers; the LM head in full), plus each sequence's whole KV cache, plus the
  new K/V written; 2 FLOP per weight per token plus attention over the context.
- prefill (n prompt tokens): the same weights once, 2 FLOP per weight per token (the LM head only
  for the last token of each sequence, as serving engines do), attention over the causal
  triangle, K/V written for every token.
Counts follow the module shapes of the HF implementation (q/k/v/o projections with Qwen2's q/k/v
bias, a gated MLP, RMSNorm weights); tests check them against transformers' own parameter count
and torch's FLOP counter.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

DTYPE_BYTES = {"float32": 4, "fp32": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2,
               "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "int8": 1}

# families whose MLP is gate/up/down (SwiGLU/GeGLU) and whose attention has no output bias
# (checked against transformers' own modules in tests/compare/analysis/test_roofline.py; others are refused rather
# than guessed: Qwen3 adds q/k norms, Gemma scales embeddings, Phi-3 fuses projections...)
_GATED_MLP = {"llama", "qwen2", "mistral"}
_QKV_BIAS = {"qwen2"}  # Qwen2: q/k/v projections always carry a bias, o_proj never


def dtype_bytes(dtype: str) -> int:
    key = dtype.replace("torch.", "").lower()
    if key not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {sorted(DTYPE_BYTES)}")
    return DTYPE_BYTES[key]


@dataclass(frozen=True)
class ModelShape:
    model_type: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied_embeddings: bool
    qkv_bias: bool
    o_bias: bool
    gated_mlp: bool

    @classmethod
    def from_hf_config(cls, cfg: Mapping[str, Any]) -> "ModelShape":
        mt = str(cfg.get("model_type", ""))
        if any(k in cfg for k in ("num_experts", "num_local_experts", "n_routed_experts")):
            raise ValueError(f"{mt}: mixture-of-experts configs are not covered by this roofline "
                             f"(per-token weight traffic depends on routing)")
        if mt not in _GATED_MLP:
            raise ValueError(f"model_type {mt!r} is not a dense decoder family this roofline covers "
                             f"({', '.join(sorted(_GATED_MLP))})")
        heads = int(cfg["num_attention_heads"])
        hidden = int(cfg["hidden_size"])
        return cls(
            model_type=mt, hidden=hidden, layers=int(cfg["num_hidden_layers"]), heads=heads,
            kv_heads=int(cfg.get("num_key_value_heads") or heads),
            head_dim=int(cfg.get("head_dim") or hidden // heads),
            intermediate=int(cfg["intermediate_size"]), vocab=int(cfg["vocab_size"]),
            tied_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            qkv_bias=mt in _QKV_BIAS or bool(cfg.get("attention_bias", False)),
            o_bias=mt not in _QKV_BIAS and bool(cfg.get("attention_bias", False)), gated_mlp=True,
        )

    # ------------------------------------------------------------ parameters
    def param_counts(self) -> dict[str, int]:
        h, q, kv = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim
        attn = h * q + 2 * h * kv + q * h
        if self.qkv_bias:
            attn += q + 2 * kv
        if self.o_bias:
            attn += h
        mlp = (3 if self.gated_mlp else 2) * h * self.intermediate
        norms = 2 * h  # input + post-attention RMSNorm
        per_layer = attn + mlp + norms
        emb = self.vocab * h
        head = 0 if self.tied_embeddings else self.vocab * h
        return {"embedding": emb, "lm_head": head, "per_layer": per_layer, "attention": attn * self.layers,
                "mlp": mlp * self.layers, "layers": per_layer * self.layers, "final_norm": h,
                "total": emb + head + per_layer * self.layers + h}

    def kv_bytes_per_token(self, kv_dtype_bytes: int) -> int:
        """K and V of one token across all layers."""
        return 2 * self.layers * self.kv_heads * self.head_dim * kv_dtype_bytes

    # ------------------------------------------------------------ per-step work
    def _body_params(self) -> int:
        """Matrix weights every token multiplies with (the layers' projections; biases and norm
        weights are elementwise work, not counted as FLOP; not the embedding, not the LM head)."""
        h, q, kv = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim
        per_layer = h * q + 2 * h * kv + q * h + (3 if self.gated_mlp else 2) * h * self.intermediate
        return per_layer * self.layers

    def decode_step(self, context_lens: Iterable[int], w_bytes: int, kv_bytes: int) -> "Work":
        """One decode step: one new token for each sequence; ``context_lens`` include that token."""
        ctx = [int(c) for c in context_lens]
        b = len(ctx)
        if b == 0:
            raise ValueError("decode_step needs at least one sequence")
        pc = self.param_counts()
        head = pc["embedding"] if self.tied_embeddings else pc["lm_head"]
        weights = (pc["layers"] + pc["final_norm"] + head) * w_bytes + b * self.hidden * w_bytes
        kv_read = sum(ctx) * self.kv_bytes_per_token(kv_bytes)
        kv_write = b * self.kv_bytes_per_token(kv_bytes)
        flops = 2 * (self._body_params() + self.vocab * self.hidden) * b + self._attn_flops_decode(ctx)
        return Work(bytes=weights + kv_read + kv_write, flops=flops,
                    detail={"weight_bytes": weights, "kv_read_bytes": kv_read, "kv_write_bytes": kv_write})

    def prefill(self, prompt_lens: Iterable[int], w_bytes: int, kv_bytes: int,
                causal: bool = True) -> "Work":
        """Prefill of whole prompts in one step (logits for each prompt's last token only)."""
        lens = [int(n) for n in prompt_lens]
        if not lens or min(lens) <= 0:
            raise ValueError("prefill needs positive prompt lengths")
        n = sum(lens)
        pc = self.param_counts()
        head = pc["embedding"] if self.tied_embeddings else pc["lm_head"]
        weights = (pc["layers"] + pc["final_norm"] + head) * w_bytes + n * self.hidden * w_bytes
        kv_write = n * self.kv_bytes_per_token(kv_bytes)
        flops = 2 * self._body_params() * n + 2 * self.vocab * self.hidden * len(lens)
        flops += sum(self._attn_flops_prefill(m, causal) for m in lens)
        return Work(bytes=weights + kv_write, flops=flops,
                    detail={"weight_bytes": weights, "kv_write_bytes": kv_write, "tokens": n})

    def _attn_flops_decode(self, ctx: list[int]) -> int:
        # QK^T and PV: 2 FLOP per multiply-add, head_dim each, per context position, per head
        return 4 * self.layers * self.heads * self.head_dim * sum(ctx)

    def _attn_flops_prefill(self, n: int, causal: bool) -> int:
        pairs = n * (n + 1) // 2 if causal else n * n
        return 4 * self.layers * self.heads * self.head_dim * pairs


@dataclass(frozen=True)
class Work:
    bytes: int
    flops: int
    detail: dict[str, int]


@dataclass(frozen=True)
class Ceilings:
    """Measured on the machine: copy bandwidth (bytes/s) and matrix-product rate (FLOP/s)."""

    bandwidth: float
    flops: float

    def floor_s(self, work: Work) -> float:
        return max(work.bytes / self.bandwidth, work.flops / self.flops)

    def bound(self, work: Work) -> str:
        return "memory" if work.bytes / self.bandwidth >= work.flops / self.flops else "compute"

    def point(self, work: Work, measured_s: float) -> dict[str, Any]:
        """A measured time against its floor: ``fraction`` = floor / measured (1.0 = at the roof),
        ``multiple`` = measured / floor."""
        floor = self.floor_s(work)
        return {"floor_ms": floor * 1e3, "measured_ms": measured_s * 1e3, "bound": self.bound(work),
                "fraction_of_roofline": floor / measured_s if measured_s > 0 else None,
                "multiple_of_floor": measured_s / floor if floor > 0 else None,
                "bytes": work.bytes, "flops": work.flops}
