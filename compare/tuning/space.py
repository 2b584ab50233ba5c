"""Knob spaces per backend for ``compare tune``: which engine options to search, over which values,
and the rules each framework enforces on them.

A knob sets either a framework-neutral ``ServingSpec`` field (the adapters in adapters/ turn it
into the engine's own flag, so the tuned engine is started exactly like ``compare run`` would) or,
where the spec has no such field, a native option of that backend (``spec.native[backend]``).

The rules below are the ones the engines themselves enforce at start-up (cited per rule); checking
them here turns a bad ``--knob`` range into one line before any engine is started, and lets the
search skip combinations the engine would refuse (recorded as infeasible, never started).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Callable

from adapters.spec import ServingSpec
from core.errors import UserError

Config = dict[str, Any]  # knob name -> value; {} is the framework's default config


@dataclass(frozen=True)
class Knob:
    name: str  # as the user writes it: --knob NAME=V1,V2
    values: tuple[Any, ...]  # default candidates (small: every trial is a real engine start)
    kind: type  # int | bool | float
    field: str | None = None  # ServingSpec field it sets ...
    native: str | None = None  # ... or the backend's native option name
    gpu_only: bool = False  # meaningless on CPU (e.g. a GPU memory fraction)
    help: str = ""

    def check(self, value: Any) -> str | None:
        if self.kind is bool:
            return None if isinstance(value, bool) else "must be true or false"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"must be a number, got {value!r}"
        if self.kind is int and value != int(value):
            return f"must be a whole number, got {value!r}"
        if self.name in _FRACTIONS and not 0 < value <= 1:
            return f"must be a fraction in (0, 1], got {value!r}"
        if self.name not in _FRACTIONS and value <= 0:
            return f"must be > 0, got {value!r}"
        return None


_FRACTIONS = {"gpu_memory_utilization", "kv_free_fraction"}


def _vllm_rules(cfg: Config, spec: ServingSpec, gpu: bool) -> str | None:
    bs = cfg.get("block_size", spec.block_size)
    # vllm/v1/attention/backends/cpu_attn.py: get_supported_kernel_block_sizes -> MultipleOf(32);
    # the CUDA FlashAttention kernels take multiples of 16
    mult = 16 if gpu else 32
    if bs is not None and bs % mult:
        return f"block_size={bs} is not a multiple of {mult} (vLLM's {'GPU' if gpu else 'CPU'} attention kernel)"
    seqs = cfg.get("max_num_seqs", spec.max_num_seqs)
    tokens = cfg.get("max_num_batched_tokens", spec.max_num_batched_tokens)
    # vllm/config/scheduler.py verify_max_model_len
    if seqs is not None and tokens is not None and tokens < seqs:
        return f"max_num_batched_tokens={tokens} < max_num_seqs={seqs} (vLLM requires >=)"
    chunked = cfg.get("enable_chunked_prefill", spec.chunked_prefill)
    mml = cfg.get("max_model_len", spec.max_model_len)
    if chunked is False and tokens is not None and mml is not None and tokens < mml:
        return (f"max_num_batched_tokens={tokens} < max_model_len={mml} with chunked prefill off "
                f"(vLLM requires >=)")
    return None


def _tgi_rules(cfg: Config, spec: ServingSpec, gpu: bool) -> str | None:
    # text-generation-launcher: the prefill budget must fit in the total batch budget
    pre, tot = cfg.get("max-batch-prefill-tokens"), cfg.get("max-batch-total-tokens")
    if pre is not None and tot is not None and pre > tot:
        return f"max-batch-prefill-tokens={pre} > max-batch-total-tokens={tot} (TGI requires <=)"
    if spec.max_model_len and pre is not None and pre < spec.max_model_len:
        # the launcher refuses a prefill budget smaller than max-input-tokens (max_model_len - 1)
        return f"max-batch-prefill-tokens={pre} < max_model_len={spec.max_model_len} (TGI requires >= max-input-tokens)"
    return None


def _trtllm_rules(cfg: Config, spec: ServingSpec, gpu: bool) -> str | None:
    bs, nt = cfg.get("max_batch_size"), cfg.get("max_num_tokens")
    if bs is not None and nt is not None and nt < bs:
        return f"max_num_tokens={nt} < max_batch_size={bs}: a full decode batch would not fit"
    return None


@dataclass(frozen=True)
class Space:
    backend: str
    knobs: tuple[Knob, ...]
    rules: Callable[[Config, ServingSpec, bool], str | None]

    def knob(self, name: str) -> Knob:
        for k in self.knobs:
            if k.name == name:
                return k
        raise KeyError(name)


SPACES: dict[str, Space] = {
    "vllm": Space("vllm", (
        Knob("max_num_seqs", (4, 16, 64, 256), int, field="max_num_seqs",
             help="requests batched per engine step"),
        Knob("max_num_batched_tokens", (512, 2048, 8192), int, field="max_num_batched_tokens",
             help="token budget per engine step (prefill chunk size)"),
        Knob("enable_chunked_prefill", (True, False), bool, field="chunked_prefill"),
        Knob("enable_prefix_caching", (True, False), bool, field="prefix_caching"),
        Knob("block_size", (32, 64, 128), int, field="block_size", help="KV block size in tokens"),
        Knob("max_model_len", (), int, field="max_model_len",
             help="no default candidates: give them with --knob max_model_len=..."),
        Knob("gpu_memory_utilization", (0.80, 0.90, 0.95), float, field="gpu_memory_utilization",
             gpu_only=True),
    ), _vllm_rules),
    "tgi": Space("tgi", (
        Knob("max-batch-prefill-tokens", (2048, 4096, 8192), int, native="--max-batch-prefill-tokens"),
        Knob("max-batch-total-tokens", (16384, 65536), int, native="--max-batch-total-tokens"),
        Knob("max-waiting-tokens", (5, 20, 50), int, native="--max-waiting-tokens"),
        Knob("waiting-served-ratio", (0.3, 1.2), float, native="--waiting-served-ratio"),
    ), _tgi_rules),
    "trtllm": Space("trtllm", (
        Knob("max_batch_size", (64, 256, 1024), int, native="max_batch_size"),
        Knob("max_num_tokens", (2048, 8192), int, native="max_num_tokens"),
        Knob("kv_free_fraction", (0.85, 0.9, 0.95), float,
             native="kv_cache_config.free_gpu_memory_fraction", gpu_only=True),
        Knob("enable_block_reuse", (True, False), bool, native="kv_cache_config.enable_block_reuse"),
    ), _trtllm_rules),
    # the fake engine (backends/fake/): a test instrument whose sequence slots follow max_num_seqs, so
    # the search itself (probes, repeats, cache, Pareto, the tuned spec) runs without a real engine
    "fake": Space("fake", (
        Knob("max_num_seqs", (1, 8), int, field="max_num_seqs", help="sequence slots (requests beyond queue)"),
    ), lambda cfg, spec, gpu: None),
}


class KnobError(UserError, ValueError):
    """A knob or range the backend does not accept; the message is one line naming the fix."""


def space_for(backend: str) -> Space:
    base = backend.partition("@")[0]
    base = {"vllm-server": "vllm", "vllm-container": "vllm"}.get(base, base)
    if base not in SPACES:
        raise KnobError(f"no tuning knobs known for backend {backend!r}; tunable: {', '.join(SPACES)}")
    return SPACES[base]


def _parse_value(kind: type, text: str) -> Any:
    t = text.strip()
    if kind is bool:
        if t.lower() in ("true", "1", "on", "yes"):
            return True
        if t.lower() in ("false", "0", "off", "no"):
            return False
        return t
    try:
        v = float(t)
    except ValueError:
        return t
    return int(v) if kind is int and v == int(v) else v


def parse_knobs(space: Space, items: list[str], spec: ServingSpec, gpu: bool) -> dict[str, tuple[Any, ...]]:
    """``--knob NAME=V1,V2`` items -> the searched grid {knob: values}; defaults when none given.

    Without ``--knob`` every knob with default candidates is searched (GPU-only knobs only on a
    GPU). With ``--knob`` only the named knobs are searched.
    """
    grid: dict[str, tuple[Any, ...]] = {}
    for item in items:
        name, eq, vals = item.partition("=")
        name = name.strip()
        try:
            knob = space.knob(name)
        except KeyError:
            raise KnobError(f"--knob {item!r}: {space.backend} has no knob {name!r}; knobs: "
                            f"{', '.join(k.name for k in space.knobs)}") from None
        if not eq or not vals.strip():
            raise KnobError(f"--knob {item!r}: expected NAME=V1,V2,... e.g. --knob {name}=4,16,64")
        if knob.gpu_only and not gpu:
            raise KnobError(f"--knob {name}: only meaningful on a GPU (no GPU here); drop it")
        values = tuple(_parse_value(knob.kind, v) for v in vals.split(","))
        for v in values:
            reason = knob.check(v)
            if reason is None:
                # a value that breaks an engine rule on its own, whatever the other knobs are
                reason = space.rules({name: v}, spec, gpu)
            if reason:
                raise KnobError(f"--knob {name}={v}: {space.backend} rejects it: {reason}")
        grid[name] = tuple(dict.fromkeys(values))
    if not grid:
        grid = {k.name: k.values for k in space.knobs if k.values and (gpu or not k.gpu_only)}
    if not any(space.rules(c, spec, gpu) is None for c in grid_points(grid)):
        raise KnobError(f"--knob: no combination of {format_grid(grid)} is accepted by "
                        f"{space.backend} (e.g. {space.rules(grid_points(grid)[0], spec, gpu)}); widen the ranges")
    return grid


def grid_points(grid: dict[str, tuple[Any, ...]]) -> list[Config]:
    names = list(grid)
    return [dict(zip(names, combo)) for combo in itertools.product(*(grid[n] for n in names))]


def format_grid(grid: dict[str, tuple[Any, ...]]) -> str:
    return " x ".join(f"{k}={{{','.join(str(v) for v in vals)}}}" for k, vals in grid.items())


def apply_config(space: Space, spec: ServingSpec, cfg: Config) -> ServingSpec:
    """The spec the trial's engine is started with: knobs over the user's base spec."""
    update: dict[str, Any] = {}
    native = {k: dict(v) for k, v in spec.native.items()}
    for name, value in cfg.items():
        knob = space.knob(name)
        if knob.field:
            update[knob.field] = value
        else:
            native.setdefault(space.backend, {})[knob.native] = value
    if native != spec.native:
        update["native"] = native
    # re-validate: model_copy(update=...) would skip the spec's own field checks
    return ServingSpec(**{**spec.model_dump(), **update})


def config_label(cfg: Config) -> str:
    return "default" if not cfg else " ".join(f"{k}={v}" for k, v in sorted(cfg.items()))
