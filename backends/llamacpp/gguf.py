"""HF checkpoint -> GGUF, converted once and cached (``compare cache ls``: kind ``gguf``).

f32 / f16 / bf16: llama.cpp's ``convert_hf_to_gguf.py --outtype`` (the converter of the pinned
source, backends/llamacpp/build.py). Q8_0 / Q4_K_M: ``llama-quantize`` from the GGUF of the
model's dtype (itself a cache entry: f32 for an f32 checkpoint, bf16 for a bf16 one; a bf16 model
written as f32 would only double the disk and the time). Key: the checkpoint's content digest, the type, the converter's version and, for
quantized types, the llama-quantize binary's digest; the tool's log is kept beside the model
(``convert.log``).

The BPE pre-tokenizer: the converter recognises a tokenizer by a hash of how it splits a fixed
text; a tokenizer it does not know (a locally trained one) is converted with the pre-tokenizer its
transformers applies to the checkpoint (:func:`declared_pre_tokenizer`; backends/llamacpp/convert_main.py),
never a guessed one: the split of the tokenizer every other engine uses. Only GPT-2's byte-level
split and Qwen2's split are declared this way; anything else is left to the converter (which
refuses what it does not know).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

from backends.llamacpp.build import SOURCE_BUILD, converter_dir
from backends.models.engine_cache import (BuildFailed, EngineCache, Entry, cache_key, checkpoint_digest, file_sha256,
                                          run_step)
from core.errors import UserError

MODEL_FILE = "model.gguf"
UNQUANTIZED = ("f32", "f16", "bf16")


# Qwen2's pre-tokenizer split (transformers' Qwen2Tokenizer; llama.cpp's "qwen2" pre type)
QWEN2_SPLIT = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
               "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")


def declared_pre_tokenizer(model_dir: str | os.PathLike[str]) -> str:
    """The llama.cpp pre-tokenizer type of the split that transformers applies to this checkpoint
    (the tokenizer vLLM and the reference use), or "-" (none recognised: the converter must know
    the tokenizer itself). transformers may not apply tokenizer.json's own pre-tokenizer: for a
    qwen2 model it loads Qwen2Tokenizer, whose split (digits one by one) replaces a plain ByteLevel
    regex; the GGUF must split as the other engines do."""
    try:
        from transformers import AutoTokenizer

        backend = AutoTokenizer.from_pretrained(str(model_dir)).backend_tokenizer
        pre = json.loads(backend.to_str()).get("pre_tokenizer") or {}
    except Exception:  # noqa: BLE001 - no fast tokenizer: nothing can be declared
        return "-"
    steps = pre.get("pretokenizers", [pre]) if pre.get("type") == "Sequence" else [pre]
    kinds = [s.get("type") for s in steps]
    if kinds == ["ByteLevel"] and steps[0].get("use_regex", True) and not steps[0].get("add_prefix_space"):
        return "gpt-2"  # tokenizers' ByteLevel regex is GPT-2's
    if kinds == ["Split", "ByteLevel"] and not steps[1].get("use_regex", True):
        pattern = (steps[0].get("pattern") or {}).get("Regex")
        if pattern == QWEN2_SPLIT and steps[0].get("behavior") == "Isolated":
            return "qwen2"
    return "-"


def _run_logged(argv: list[str], log: Path, env: dict[str, str] | None = None,
                stop: threading.Event | None = None) -> int:
    with open(log, "a") as f:
        f.write(" ".join(argv) + "\n")
        f.flush()
        return run_step(argv, stop, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                        env={**os.environ, **(env or {})})


def prepare_gguf(model_dir: str, gguf_type: str, quantize_bin: Path | None = None, cache: EngineCache | None = None,
                 log: Callable[[str], None] | None = None, base_type: str = "f32",
                 stop: threading.Event | None = None) -> tuple[Entry, bool]:
    """(cache entry holding ``model.gguf``, hit). A quantized type is made from the ``base_type`` GGUF.
    ``stop`` set (the run is stopping) ends a conversion under way: nothing is published."""
    say = log or (lambda s: print(s, file=sys.stderr, flush=True))
    if not Path(model_dir, "config.json").is_file():
        raise UserError(f"{model_dir}: not a local HF checkpoint (no config.json); llama.cpp's converter needs "
                        "the checkpoint directory (or pass native llamacpp.gguf=FILE)")
    cache = cache or EngineCache()
    conv = converter_dir(cache, say)
    pre = declared_pre_tokenizer(model_dir)
    digest = checkpoint_digest(model_dir, cache.root / ".memo")
    fields: dict[str, Any] = {"artifact": "gguf", "checkpoint": digest, "type": gguf_type,
                              "converter": f"llama.cpp {SOURCE_BUILD} convert_hf_to_gguf.py",
                              "declared_pre_tokenizer": pre}
    if gguf_type not in UNQUANTIZED:
        if quantize_bin is None:
            raise UserError(f"GGUF type {gguf_type} needs llama-quantize")
        if base_type not in UNQUANTIZED:
            raise UserError(f"GGUF {gguf_type} is made from an f32, f16 or bf16 GGUF, not {base_type}")
        base, _ = prepare_gguf(model_dir, base_type, cache=cache, log=say, stop=stop)
        fields["quantize"] = {"binary_sha256": file_sha256(quantize_bin)[:16], "from": base.key}
    key = cache_key(fields)

    def build(tmp: Path) -> None:
        t0 = time.monotonic()
        if gguf_type in UNQUANTIZED:
            say(f"converting {model_dir} to GGUF {gguf_type} (llama.cpp {SOURCE_BUILD} converter"
                f"{', pre-tokenizer declared ' + pre if pre != '-' else ''})")
            argv = [sys.executable, "-m", "backends.llamacpp.convert_main", pre, str(conv), str(model_dir),
                    "--outtype", gguf_type, "--outfile", str(tmp / MODEL_FILE)]
            rc = _run_logged(argv, tmp / "convert.log", {"NO_LOCAL_GGUF": "1", "HF_HUB_OFFLINE": "1",
                                                         "PYTHONPATH": _pythonpath()}, stop)
        else:
            say(f"quantizing {model_dir} to GGUF {gguf_type} with llama-quantize")
            argv = [str(quantize_bin), str(base.path / MODEL_FILE), str(tmp / MODEL_FILE), gguf_type]
            rc = _run_logged(argv, tmp / "convert.log", stop=stop)
        tail = "\n".join((tmp / "convert.log").read_text(errors="replace").splitlines()[-5:])
        if rc != 0 or not (tmp / MODEL_FILE).is_file():
            raise BuildFailed(f"GGUF {gguf_type} of {model_dir} failed (exit {rc})", tail)
        say(f"GGUF {gguf_type} written in {time.monotonic() - t0:.1f} s")

    meta = {"kind": "gguf", "source": str(Path(model_dir).resolve()), **fields,
            "listing": {"kind": "gguf", "model": str(Path(model_dir).resolve()), "flow": "convert_hf_to_gguf.py"
                        + (" + llama-quantize" if gguf_type not in UNQUANTIZED else ""), "quant": gguf_type,
                        "built_by": f"llama.cpp {SOURCE_BUILD}", "gpu": None}}
    return cache.get_or_build(key, meta, build, log=say)


def _pythonpath() -> str:
    root = str(Path(__file__).resolve().parents[2])
    old = os.environ.get("PYTHONPATH")
    return root + (os.pathsep + old if old else "")
