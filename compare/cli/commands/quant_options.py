"""The options of ``compare quant matrix|check|run|quality``, each a frozen pydantic model
(compare/cli/model_args.py): default, constraint and help declared once, argparse generated from
them, the commands' bodies typed (compare/cli/commands/quant.py, quant_quality.py)."""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Literal

from pydantic import create_model

from adapters.quant_matrix import BACKENDS
from compare.cli.model_args import CliModel, opt
from compare.cli.parser import run_id
from compare.cli.run_options import SpecOptions, WorkloadOptions

_CPU_FLAGS = ("judge CPU kernels by these /proc/cpuinfo flags (another host's 'flags' line, e.g. \"avx2 fma\") "
              "instead of this machine's")


class MachineOptions(CliModel):
    """``--device`` and ``--cpu-flags``: the machine a quantization cell is judged for."""

    device: Literal["cpu", "cuda"] | None = opt(None)
    cpu_flags: str | None = opt(None, _CPU_FLAGS, metavar="FLAGS")


class MatrixOptions(MachineOptions):
    device: Literal["cpu", "cuda"] | None = opt(None, "default: this machine's")
    as_json: bool = opt(False, flag="--json")


class CheckOptions(MachineOptions):
    backend: Literal[BACKENDS] = opt(...)  # type: ignore[valid-type]
    scheme: str = opt(...)


class QuantRunOptions(SpecOptions, WorkloadOptions):
    """``compare quant run``: the spec and workload as `compare run` takes them, one run per scheme."""

    schemes: str = opt(..., "comma-separated, e.g. fp32,w8a8-int8,w4a16")
    checkpoint: list[str] = opt(help="a pre-quantized checkpoint for a scheme (made by `compare quantize`)",
                                default_factory=list, append=True, metavar="SCHEME=DIR")
    dummy: bool = opt(False, "random weights: speed only (quality refused)")
    accuracy: str | None = opt(None, "exact-match task: {\"prompt\",\"answer\"} lines", metavar="JSONL")
    quality_prompts: int = opt(8, ge=1)
    quality_tokens: int = opt(32, ge=1)
    quality_device: Literal["auto", "cpu", "cuda"] = opt(
        "auto", "where the float32 reference scores the answers once the engines stopped (auto: the GPU when it "
        "fits in its free memory, else the CPU)")
    concurrency: str = opt("4", "closed-loop levels (default 4)")
    warmup: int = opt(2, ge=0)
    timeout: float = opt(600.0, gt=0, fix="seconds")
    out: Path = opt(Path("results"))
    run_id: str | None = opt(None, parse=run_id)
    format: Literal["table", "json"] = opt("table")


_SIZES = "--windows >= 1, --window-len >= 8 and --top-k >= 1, please"


class QualityBase(CliModel):
    """``compare quant quality``'s options but the per-engine ``--NAME-schemes`` (see :func:`quality_options`)."""

    model: Path | None = opt(None, "default: the trained tiny model (built if missing)")
    checkpoint: list[str] = opt(default_factory=list, append=True, metavar="SCHEME=DIR")
    windows: int = opt(16, "held-out windows (default 16)", ge=1, says=_SIZES)
    window_len: int = opt(256, "tokens per window (default 256)", ge=8, says=_SIZES)
    top_k: int = opt(5, "vLLM prompt logprobs per position (default 5)", ge=1, says=_SIZES)
    format: Literal["table", "json"] = opt("table")
    out: Path | None = opt(None, "also write the JSON here")

    def schemes_of(self, engine: str) -> str | None:
        """``--ENGINE-schemes`` as given, None where unset (the engine's default list)."""
        given: str | None = getattr(self, f"{engine.replace('-', '_')}_schemes")
        return given


@functools.cache
def quality_options(engines: tuple[tuple[str, str, bool], ...]) -> type[QualityBase]:
    """The model of ``compare quant quality`` for these engines ((name, default schemes, loads
    checkpoints) each): one ``--NAME-schemes`` per engine, and --checkpoint's help naming those that
    load one."""
    loads = "/".join(e for e, _, ckpt in engines if ckpt)
    fields: dict[str, Any] = {
        f"{e.replace('-', '_')}_schemes": (str | None, opt(
            None, f"comma-separated (default {schemes}, less what this machine cannot run; '' skips {e})",
            flag=f"--{e}-schemes"))
        for e, schemes, _ in engines}
    fields["checkpoint"] = (list[str], opt(help=f"a {loads} checkpoint for a scheme (default: made by `compare "
                                                "quantize`, cached)", default_factory=list, append=True,
                                           metavar="SCHEME=DIR"))
    model: type[QualityBase] = create_model("QuantQualityOptions", __base__=QualityBase, **fields)
    return model
