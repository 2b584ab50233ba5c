"""Quality parity against a reference, so a speedup never hides a quality loss.

The reference is the unquantized model in float32 under transformers (backends/hf/reference.py): for a
checkpoint made by `compare quantize` that is its recorded source, else the model itself.
For every backend under test we send a few greedy probe requests (from the run's own request
list) while it runs, and once every engine has stopped teacher-force the reference on the exact
tokens the backend produced (compare/quality/deferred.py: the reference never shares a device
with an engine under test):

* token agreement: share of positions where the backend's token is the reference's argmax given
  the same prefix; ``first_divergence``: the first such position that differs (the position where
  free-running greedy outputs would part), None when all agree;
* mean per-token logprob difference (backend - reference, on the backend's tokens) and a
  truncated KL(backend || reference) over the backend's top-k tokens, where the backend streams
  logprobs (vLLM does; our hf and openvino backends do not);
* for every backend, logprobs streamed or not: the reference's perplexity of the backend's output
  and the mean reference regret (the reference's log-prob of its own argmax minus that of the
  backend's token, 0 where they agree): a perplexity-based divergence for OpenVINO GenAI;
* held-out text, teacher-forced (``heldout_parity``; rows from each engine's ``heldout`` hook, backends/heldout.py):
  perplexity per engine and scheme, argmax agreement, log-prob difference and KL;
* optionally, exact-match accuracy on a user JSONL of {"prompt", "answer"} pairs, with an exact
  McNemar test of the paired difference against the reference's own answers.

Dummy-weight runs are refused: random weights make every quality number meaningless.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adapters.spec import ServingSpec
from core.records import GenerationRequest, StreamEnd, TokenEvent
from core.errors import UserError
from core.results.quality import AccuracyResult, Discordant, Parity, PromptParity


@dataclass(frozen=True)
class QualityOptions:
    mode: str = "auto"  # auto: only for quantized / reduced-precision backends; on; off
    device: str = "auto"  # where the reference runs once the engines stopped: auto | cpu | cuda (deferred.py)
    num_prompts: int = 8
    max_tokens: int = 32
    top_k: int = 5
    reference_model: str | None = None  # default: provenance source, else the model itself
    accuracy: tuple[tuple[str, str], ...] = ()  # (prompt, answer) pairs
    accuracy_max_tokens: int = 16


def load_accuracy_jsonl(path: str | Path) -> tuple[tuple[str, str], ...]:
    from core.fsutil import read_user_text

    fix = 'pass a JSONL of {"prompt": ..., "answer": ...} lines'
    pairs = []
    for n, line in enumerate(read_user_text(Path(path), "accuracy file", fix).splitlines(), 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except ValueError:
            d = None
        if not (isinstance(d, dict) and isinstance(d.get("prompt"), str) and isinstance(d.get("answer"), str)):
            raise UserError(f"{path}:{n}: expected a JSON object with \"prompt\" and \"answer\" strings; {fix}")
        pairs.append((d["prompt"], d["answer"]))
    if not pairs:
        raise UserError(f"accuracy file {path} has no prompt/answer pairs")
    return tuple(pairs)


# ---------------------------------------------------------------- pure math

def parity(samples: list[dict[str, Any]], scores: list[list[dict[str, Any]]]) -> Parity:
    """Aggregate agreement / divergence / logprob metrics. ``samples[i]``: {"tokens", "logprobs"?,
    "top"?: [{id: lp}]}; ``scores[i]``: the reference's teacher-forced rows for those tokens."""
    n_tok = agree = exact = 0
    first_div: list[int] = []
    diffs: list[float] = []
    kls: list[float] = []
    ref_lp: list[float] = []
    regret: list[float] = []
    per = []
    for s, rows in zip(samples, scores):
        toks = s["tokens"]
        hits = [r["argmax"] == t for t, r in zip(toks, rows)]
        fd = next((i for i, h in enumerate(hits) if not h), None)
        n_tok += len(toks)
        agree += sum(hits)
        exact += fd is None
        first_div.append(len(toks) if fd is None else fd)
        if s.get("logprobs"):
            diffs += [c - r["logprob"] for c, r in zip(s["logprobs"], rows)]
        # needs no engine logprobs (OpenVINO GenAI streams none): the reference's judgement of
        # the engine's tokens, and what they cost it vs its own greedy choice at each prefix
        ref_lp += [r["logprob"] for r in rows if "logprob" in r]
        regret += [r["argmax_logprob"] - r["logprob"] for r in rows if "argmax_logprob" in r and "logprob" in r]
        for top, r in zip(s.get("top") or [], rows):
            ref = r.get("want") or {}
            kls.append(sum(math.exp(lc) * (lc - ref[t]) for t, lc in top.items() if t in ref))
        per.append(PromptParity(tokens=len(toks), first_divergence=fd,
                                agreement=round(sum(hits) / max(1, len(toks)), 4)))
    # figures without data are left out (not None): an absent key says "not measurable here"
    out: dict[str, Any] = {}
    if diffs:
        out["mean_logprob_diff"] = round(sum(diffs) / len(diffs), 5)
        out["mean_abs_logprob_diff"] = round(sum(abs(d) for d in diffs) / len(diffs), 5)
    if kls:
        out["kl_topk"] = round(sum(kls) / len(kls), 6)
    if ref_lp:
        out["reference_perplexity_of_output"] = round(math.exp(-sum(ref_lp) / len(ref_lp)), 4)
    if regret:
        out["mean_reference_regret"] = round(sum(regret) / len(regret), 5)
    return Parity(prompts=len(samples), tokens=n_tok,
                  token_agreement=round(agree / n_tok, 4) if n_tok else None,
                  exact_sequence_match=round(exact / len(samples), 4) if samples else None,
                  mean_first_divergence=round(sum(first_div) / len(first_div), 2) if first_div else None,
                  per_prompt=per, **out)


def heldout_parity(rows: list[dict[str, Any]], ref: list[dict[str, Any]]) -> dict[str, Any]:
    """Teacher-forced held-out metrics of one engine vs the reference (backends/heldout.py
    rows: per position the true next token's log-prob ``lp``, the ``argmax``, and the engine's
    ``top`` {id: lp} or ``full`` log-prob vector). Perplexity of each; token agreement: share of
    positions where both argmaxes agree (what greedy decoding would pick given the same prefix);
    mean (abs) log-prob difference on the true tokens; KL(engine || reference) over the full
    vocabulary where the engine exposes it, else over its top-k, renormalized (a lower bound
    of the part of the divergence that those tokens carry, not of the full KL)."""
    lp_e = [x for r in rows for x in r["lp"]]
    lp_r = [x for r in ref for x in r["lp"]]
    if not lp_e or len(lp_e) != len(lp_r):
        raise ValueError(f"{len(lp_e)} engine positions vs {len(lp_r)} reference positions")
    am_e = [x for r in rows for x in r["argmax"]]
    am_r = [x for r in ref for x in r["argmax"]]
    n = len(lp_e)
    nll, nll_r = -sum(lp_e) / n, -sum(lp_r) / n
    diffs = [a - b for a, b in zip(lp_e, lp_r)]
    out: dict[str, Any] = {
        "positions": n, "perplexity": round(math.exp(nll), 4), "reference_perplexity": round(math.exp(nll_r), 4),
        "perplexity_delta_pct": round(100 * (math.exp(nll - nll_r) - 1), 3), "nll_delta": round(nll - nll_r, 5),
        "token_agreement": round(sum(a == b for a, b in zip(am_e, am_r)) / n, 4),
        "mean_logprob_diff": round(sum(diffs) / n, 5), "mean_abs_logprob_diff": round(sum(map(abs, diffs)) / n, 5),
    }
    if all(r.get("full") is not None for r in rows):
        import numpy as np

        kl = [float((np.exp(e) * (e.astype(np.float64) - f)).sum(axis=1).mean()) for e, f in
              ((r["full"], g["full"]) for r, g in zip(rows, ref))]
        out["kl"], out["kl_kind"] = round(sum(kl) / len(kl), 6), "full vocabulary"
    elif all(r.get("top") for r in rows):
        kls = [_kl_renormalized(top, full) for r, g in zip(rows, ref) for top, full in zip(r["top"], g["full"])]
        k = max(len(t) for r in rows for t in r["top"])
        out["kl"], out["kl_kind"] = round(sum(kls) / len(kls), 6), f"top-{k}, renormalized"
    return out


def _kl_renormalized(top: dict[int, float], ref_logp: Any) -> float:
    """KL(engine || reference) over the engine's top-k tokens, both distributions renormalized to
    that set: never negative (the plain truncated sum can be), 0 when both agree in shape there."""
    ids = list(top)
    e = [top[t] for t in ids]
    r = [float(ref_logp[t]) for t in ids]
    le, lr = _logsumexp(e), _logsumexp(r)
    return max(0.0, sum(math.exp(a - le) * ((a - le) - (b - lr)) for a, b in zip(e, r)))


def _logsumexp(xs: list[float]) -> float:
    m = max(xs)
    return m + math.log(sum(math.exp(x - m) for x in xs))


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value from the discordant pairs (b: only A right, c: only B)."""
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    p = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return min(1.0, 2 * p)


def is_correct(output: str, answer: str) -> bool:
    """Exact match of the output's first non-empty line with the answer (trimmed, case-folded)."""
    line = next((ln for ln in output.strip().splitlines() if ln.strip()), "")
    return line.strip().casefold() == answer.strip().casefold()


def accuracy(cand: list[bool], ref: list[bool]) -> AccuracyResult:
    b = sum(r and not c for c, r in zip(cand, ref))  # reference right, candidate wrong
    c = sum(c and not r for c, r in zip(cand, ref))
    n = len(cand)
    return AccuracyResult(n=n, accuracy=round(sum(cand) / n, 4) if n else None,
                          reference_accuracy=round(sum(ref) / n, 4) if n else None,
                          difference=round((sum(cand) - sum(ref)) / n, 4) if n else None,
                          discordant=Discordant(only_reference_correct=b, only_candidate_correct=c),
                          mcnemar_p=round(mcnemar_exact(b, c), 6), test="exact McNemar (paired, two-sided)")


# ---------------------------------------------------------------- against real engines

def reference_model_for(spec: ServingSpec, opts: QualityOptions) -> str | None:
    if opts.reference_model:
        return opts.reference_model
    prov = Path(spec.model) / "llm_compare_quant.json"
    if prov.is_file():  # (written by `compare quantize`; damaged: no reference, and quality says so)
        from core.fsutil import read_if_regular

        try:
            doc = json.loads(read_if_regular(prov) or b"")
        except ValueError:
            return None
        source = doc.get("source") if isinstance(doc, dict) else None
        return source if isinstance(source, str) else None
    return spec.model if Path(spec.model, "config.json").is_file() else None


def wanted(spec: ServingSpec, opts: QualityOptions) -> str | None:
    """None when quality should be measured, else why not (also for 'auto' skips)."""
    if opts.mode == "off":
        return "quality measurement switched off"
    if spec.load_format == "dummy":
        return "refused: load_format=dummy runs random weights; only speed is meaningful"
    if opts.mode == "auto":
        cfg = Path(spec.model, "config.json")
        reduced = (spec.quantization != "none" or spec.kv_cache_dtype != "auto"
                   or spec.dtype in ("bfloat16", "float16")
                   or (cfg.is_file() and "quantization_config" in json.loads(cfg.read_text())))
        if not reduced:
            return "skipped: unquantized float32/auto run"
    return None


async def _probe(backend: Any, req: GenerationRequest, timeout_s: float) -> dict[str, Any]:
    """One greedy request, keeping the top-k logprobs that the timing records drop."""
    import asyncio

    s: dict[str, Any] = {"tokens": [], "logprobs": [], "top": []}
    if backend.unary_quality_probes:  # a client whose probes are one request, no stream
        async with asyncio.timeout(timeout_s):
            r = await backend.generate_once(req)
        s = {"tokens": r["token_ids"], "logprobs": r["logprobs"], "top": r["top"]}
        if None in s["logprobs"] or len(s["logprobs"]) != len(s["tokens"]):
            s["logprobs"], s["top"] = [], []
        return s
    async with asyncio.timeout(timeout_s):
        async for ev in backend.stream(req):
            if isinstance(ev, TokenEvent):
                s["tokens"] += ev.token_ids
                s["logprobs"] += list(ev.logprobs or ())
                s["top"] += list(ev.top_logprobs or ())
            elif isinstance(ev, StreamEnd):
                break
    if len(s["logprobs"]) != len(s["tokens"]):
        s["logprobs"], s["top"] = [], []
    return s


def verification(spec: ServingSpec, backend: Any) -> dict[str, Any]:
    """What the engine loaded vs the requested quantization (compare/quality/verify.py)."""
    from compare.quality.verify import verify

    try:
        from core.quant_report import QuantReport

        d = backend.describe().as_dict()
        return verify(spec, QuantReport.of_description(d), resolved=(d.get("native_config") or {}).get("resolved"),
                      framework=d.get("framework", backend.name))
    except Exception as e:  # a backend with an unexpected description must not lose the run
        return {"valid": None, "status": "error", "reason": f"{type(e).__name__}: {e}"}
