"""``compare quant quality``: every scheme's quality cost on held-out text, per engine.

    compare quant quality [--model DIR] [--vllm-schemes fp32,bf16,w8a8-int8,w4a16]
        [--openvino-schemes fp32,w8a16-int8,w4a16] [--checkpoint SCHEME=DIR ...]
        [--windows 16 --window-len 256 --top-k 5] [--format table|json] [--out FILE]

The model defaults to the trained tiny model (backends/models/train.py; built on first use): a
random-weight model's flat logits make quality deltas meaningless. The held-out text is the
trained model's held-out split. vLLM's quantized checkpoints are made by ``compare quantize`` from
the model (cached under the cache root, keyed by the model's digest) unless ``--checkpoint``
names one; OpenVINO's are NNCF exports (cached in the engine cache). Each engine scores the same
windows teacher-forced and is compared with the float32 reference (compare/quality/parity.py:
perplexity, token agreement, log-prob difference, KL). The engines are the backends whose registry
entry has a ``heldout`` hook (backends/heldout.py), each with its own ``--NAME-schemes``; the
reference is the backend that plays the "reference" role. Exit 1 when an engine failed (its row
says why), 2 on bad input.
"""
from __future__ import annotations

import argparse
import gc
import inspect
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from compare.cli.commands.quant_options import QualityBase, quality_options
from compare.cli.model_args import add_options
from core.errors import UserError


def _engines() -> list[tuple[str, Any]]:
    """(backend name, its backends.heldout.HeldOut) of every engine that scores held-out text, in
    row order; the reference is not among them."""
    from backends import registry

    ref = registry.with_role("reference").name
    found = [(e.name, h) for e in registry.with_hook("heldout") if e.name != ref and (h := registry.heldout_of(e))]
    return sorted(found, key=lambda x: x[1].rank)


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _options() -> type[QualityBase]:
    """``compare quant quality``'s options model: one ``--NAME-schemes`` per engine (quant_options.py)."""
    return quality_options(tuple((e, h.schemes, bool(h.checkpoints)) for e, h in _engines()))


def add_quality_parser(qs: argparse._SubParsersAction) -> None:
    q = qs.add_parser("quality", help="held-out perplexity and parity per engine and scheme vs fp32 transformers")
    model = _options()
    add_options(q, model)  # each option's default, check and help: quant_options.py
    q.set_defaults(func=lambda args: _quality(model.of(args)))


def _schemes(engine: str, arg: str | None, default: str, machine: Any, left_out: list[str]) -> list[str]:
    """The schemes named, each one this machine (device, CPU instruction sets) can run. A scheme
    named by the user that this machine cannot run is refused; the default list drops such a
    scheme instead, saying so (the defaults are meant to run anywhere: an AVX2-only CPU has no
    W4A16 kernel for vLLM, an AVX-512 one has)."""
    from adapters.quant import SCHEMES, cell

    out = []
    for s in [x.strip() for x in (default if arg is None else arg).split(",") if x.strip()]:
        if s not in SCHEMES or s == "auto":
            raise UserError(f"--{engine}-schemes: unknown scheme {s!r}; see `compare quant matrix`")
        c = cell(engine, s, machine)
        if not c.supported and arg is None:
            left_out.append(f"{engine} {s}: not measured, {engine} cannot run it on this {machine.device}: {c.reason}")
            continue
        if not c.supported:
            raise UserError(f"--{engine}-schemes: {engine} cannot run {s} on {machine.device}: {c.reason} "
                            f"(nearest supported: {c.alternative or 'none'})")
        out.append(s)
    return out


def _checkpoints(o: QualityBase, model: Path, schemes: list[str], engine: str) -> dict[str, Path]:
    """scheme -> checkpoint for every weight-quantized scheme of ``engine`` (made and cached if missing)."""
    from adapters.quant import SCHEMES
    from backends.models.tiny import cache_root
    from compare.cli.commands.quantize import source_hash

    given: dict[str, Path] = {}
    for item in o.checkpoint:
        s, eq, d = item.partition("=")
        if not eq or s not in SCHEMES or not Path(d, "config.json").is_file():
            raise UserError(f"--checkpoint {item!r}: expected SCHEME=DIR, DIR a checkpoint made by "
                            f"compare quantize --model {model} --scheme SCHEME --out DIR")
        given[s] = Path(d)
    out: dict[str, Path] = {}
    digest = None
    for s in schemes:
        if SCHEMES[s].kind != "weights":
            continue
        if s in given:
            out[s] = given[s]
            continue
        digest = digest or source_hash(model)
        d = cache_root() / "quant-ckpt" / digest[:16] / s
        prov = d / "llm_compare_quant.json"
        if not (prov.is_file() and json.loads(prov.read_text()).get("source_sha256") == digest):
            print(f"making the {s} checkpoint with compare quantize -> {d}", file=sys.stderr, flush=True)
            # the same interpreter as this command; `-m compare.cli.main` would re-import a loaded module
            code = "import sys; from compare.cli.main import main; sys.exit(main())"
            r = subprocess.run([sys.executable, "-c", code, "quantize", "--model", str(model), "--scheme", s,
                                "--out", str(d)], stdout=subprocess.PIPE, text=True)
            if r.returncode != 0:
                raise UserError(f"compare quantize --scheme {s} failed (exit {r.returncode}); pass "
                                f"--checkpoint {s}=DIR or drop {s} from --{engine}-schemes")
        out[s] = d
    return out


def _spec(engine: str, dtype: str, model: Path, scheme: str, window_len: int, ckpt: Path | None) -> Any:
    """The engine's spec for a scheme; ``dtype``: the engine's compute dtype where the scheme sets
    none (backends.heldout.HeldOut.dtype). The plan is resolved here, so a combination the engine
    refuses exits 2 before any engine starts."""
    from adapters.quant import SCHEMES
    from adapters.spec import ServingSpec
    from backends import registry

    upd = dict(SCHEMES[scheme].spec_update)
    dtype = upd.pop("dtype", None) or dtype
    spec = ServingSpec(**{"model": str(ckpt or model), "dtype": dtype, "max_model_len": window_len + 16,
                          "kv_cache_memory_bytes": 64 << 20, "enforce_eager": True, "prefix_caching": False, **upd})
    registry.prepare(engine, spec)
    return spec


def _row(engine: str, scheme: str, fn: Any, ref: list[Any]) -> dict[str, Any]:
    from compare.quality.parity import heldout_parity

    t0 = time.monotonic()
    try:
        rows, loaded = fn()
        return {"engine": engine, "scheme": scheme, "status": "measured", "seconds": round(time.monotonic() - t0, 1),
                "loaded": loaded, **heldout_parity(rows, ref)}
    except UserError:
        raise
    except Exception as e:  # one engine failing must not lose the others' numbers
        return {"engine": engine, "scheme": scheme, "status": "failed", "reason": f"{type(e).__name__}: {str(e)[:300]}"}


def _verified(engine: str, spec: Any, desc: dict[str, Any]) -> dict[str, Any]:
    from compare.quality.verify import verify

    from core.quant_report import QuantReport

    v = verify(spec, QuantReport.of_description(desc), resolved=(desc.get("native_config") or {}).get("resolved"), framework=engine)
    lo = v.get("loaded", {})
    return {"valid": v.get("valid"), "problems": v.get("problems", []), "method": lo.get("method"),
            "kernels": lo.get("kernels", []), "linear_ratio": lo.get("linear_ratio")}


def _quality(o: QualityBase) -> int:
    from adapters.spec import ServingSpec
    from backends import registry
    from backends.models.probe import probe_machine
    from backends.models.train import default_trained_dir, ensure_trained_model, heldout_windows, provenance

    machine = probe_machine()
    device = machine.device
    engines = _engines()
    left_out: list[str] = []
    plan = {e: _schemes(e, o.schemes_of(e), h.schemes, machine, left_out)
            for e, h in engines}
    if not any(plan.values()):
        raise UserError("no schemes: name at least one in " + " or ".join(f"--{e}-schemes" for e, _ in engines))
    if o.model is not None and not Path(o.model, "config.json").is_file():
        raise UserError(f"--model {o.model}: no config.json there; pass a local model directory")
    for line in left_out:  # after the refusals of what was given: bad input stays one line
        _log(line)
    if o.model is None:
        print(f"trained tiny model: {default_trained_dir()} (built on first use, minutes)", file=sys.stderr)
        model = ensure_trained_model(log=lambda s: print(s, file=sys.stderr, flush=True))
    elif not Path(o.model, "config.json").is_file():
        raise UserError(f"--model {o.model}: no config.json there; pass a local model directory")
    else:
        model = Path(o.model).resolve()
    ckpts = {e: _checkpoints(o, model, plan[e], e) if h.checkpoints else {} for e, h in engines}
    specs = {(e, s): _spec(e, h.dtype, model, s, o.window_len, ckpts[e].get(s)) for e, h in engines for s in plan[e]}
    from transformers import AutoTokenizer

    try:
        windows = heldout_windows(AutoTokenizer.from_pretrained(str(model)), o.windows, o.window_len, model)
    except FileNotFoundError as e:
        raise UserError(f"--model {model}: {e}; measure it on the machine that trained it") from None
    if not windows:
        raise UserError(f"the held-out text is shorter than --window-len {o.window_len}")
    # engines may log to stdout by default (vLLM does): keep stdout for the table or the JSON
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    reference = registry.with_role("reference")
    ref_heldout = registry.heldout_of(reference)
    if ref_heldout is None:
        raise UserError(f"the reference backend {reference.name!r} scores no held-out text (its entry has no heldout)")
    ref, _ = ref_heldout.score(ServingSpec(model=str(model), dtype="float32"), windows, o.top_k, _log)
    from compare.quality.parity import heldout_parity

    rows = [{"engine": ref_heldout.label or reference.name, "scheme": "fp32", "status": "measured",
             "loaded": {"reference": True}, **heldout_parity(ref, ref)}]
    from compare.running import aio

    for e, h in engines:
        for s in plan[e]:
            def score(spec: Any = specs[e, s], e: str = e, h: Any = h) -> tuple[Any, Any]:
                out = h.score(spec, windows, o.top_k, _log)
                if inspect.iscoroutine(out):
                    out = aio.run(out)
                gc.collect()  # a stopped engine's objects now, not in a half-torn-down interpreter at exit
                r, loaded = out
                return r, ({**_verified(e, spec, loaded), "dtype": spec.dtype} if h.describes else loaded)

            rows.append(_row(h.label or e, s, score, ref))
    result = {"model": str(model), "model_provenance": provenance(model), "device": device,
              "date": time.strftime("%Y-%m-%d %H:%M %Z"), "windows": len(windows), "window_len": o.window_len,
              "top_k": o.top_k, "reference": "transformers float32 on the unquantized model",
              "checkpoints": {s: str(d) for c in ckpts.values() for s, d in c.items()}, "rows": rows}
    if o.out:
        from core.fsutil import write_json_atomic

        write_json_atomic(o.out, result)
    if o.format == "json":
        print(json.dumps(result, indent=2))
    else:
        _print(result)
    return 0 if all(r["status"] == "measured" for r in rows) else 1


def _f(x: Any, nd: int) -> str:
    return "-" if x is None else f"{round(x, nd) + 0.0:.{nd}f}"  # no "-0.000"


def _print(res: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"held-out quality per engine and scheme ({res['windows']} x {res['window_len']} tokens; "
                    "vs float32 transformers, teacher-forced)")
    for c in ("engine", "scheme", "loaded", "perplexity", "vs ref", "agree", "|dlogp|", "KL", "KL over"):
        t.add_column(c)
    for r in res["rows"]:
        if r["status"] != "measured":
            t.add_row(r["engine"], r["scheme"], "FAILED: " + r.get("reason", ""), *["-"] * 6)
            continue
        lo = r.get("loaded") or {}
        what = ", ".join(lo.get("kernels") or []) or (
            ", ".join(f"{k}:{v}" for k, v in sorted((lo.get("weight_types") or {}).items())) or "-")
        if lo.get("dtype") and lo["dtype"] != "float32":
            what = f"{lo['dtype']}; {what}"
        if lo.get("valid") is False:
            what = "INVALID: " + "; ".join(lo.get("problems", []))
        t.add_row(r["engine"], r["scheme"], what, _f(r["perplexity"], 3), f"{r['perplexity_delta_pct']:+.2f}%",
                  _f(r["token_agreement"], 4), _f(r["mean_abs_logprob_diff"], 4), _f(r.get("kl"), 5),
                  r.get("kl_kind", "-"))
    Console(width=200).print(t)
