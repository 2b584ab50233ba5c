"""Held-out quality per engine and scheme, for real: `compare quant quality` on the trained tiny
model with vLLM (fp32 + W8A8-int8, a checkpoint made by `compare quantize`) and OpenVINO (fp32 +
NNCF W8A16-int8), each scored teacher-forced against the float32 transformers reference.

Engine starts: 2 vLLM engines, 2 OpenVINO compiles (exports cached), one llmcompressor run (cached).
"""
from __future__ import annotations

import json
import math

import pytest

from tests.conftest import run_cli

pytestmark = [pytest.mark.engine, pytest.mark.timeout(2400)]


def test_heldout_parity_math():
    import numpy as np

    from compare.quality.parity import heldout_parity

    ref_full = np.log(np.array([[0.7, 0.2, 0.1], [0.5, 0.4, 0.1]], dtype=np.float32))
    ref = [{"lp": [float(ref_full[0, 1]), float(ref_full[1, 0])], "argmax": [0, 0], "full": ref_full}]
    same = heldout_parity(ref, ref)
    assert same["perplexity_delta_pct"] == 0 and same["token_agreement"] == 1 and same["kl"] == 0
    eng_full = np.log(np.array([[0.6, 0.3, 0.1], [0.3, 0.6, 0.1]], dtype=np.float32))
    eng = [{"lp": [float(eng_full[0, 1]), float(eng_full[1, 0])], "argmax": [0, 1], "full": eng_full}]
    d = heldout_parity(eng, ref)
    assert d["token_agreement"] == 0.5 and d["kl"] > 0 and d["kl_kind"] == "full vocabulary"
    nll = -(math.log(0.3) + math.log(0.3)) / 2
    assert d["perplexity"] == pytest.approx(math.exp(nll), rel=1e-4)
    top = [{"lp": eng[0]["lp"], "argmax": [0, 1], "full": None,
            "top": [{0: math.log(0.6), 1: math.log(0.3)}, {1: math.log(0.6), 0: math.log(0.3)}]}]
    t = heldout_parity(top, ref)
    assert t["kl_kind"] == "top-2, renormalized" and t["kl"] > 0
    # renormalized over the engine's top-k: never negative, 0 where the shapes agree there
    assert heldout_parity([{**top[0], "top": [{0: math.log(0.7), 1: math.log(0.2)}] * 2}],
                          [{**ref[0], "full": np.log(np.array([[0.7, 0.2, 0.1]] * 2))}])["kl"] == 0
    with pytest.raises(ValueError):
        heldout_parity([{"lp": [0.0], "argmax": [0]}], ref)


@pytest.mark.isa  # the default schemes are what this CPU can run
@pytest.mark.parametrize("args, words", [
    (("--vllm-schemes", "fp99"), "unknown scheme 'fp99'"),
    (("--openvino-schemes", "w8a8-int8"), "openvino cannot run w8a8-int8"),
    (("--vllm-schemes", "", "--openvino-schemes", ""), "no schemes"),
])
def test_bad_input_is_one_line_exit_2(args, words, tmp_path):
    r = run_cli("quant", "quality", "--model", str(tmp_path), *args, timeout=120)
    assert r.returncode == 2, r.stderr[-1500:]
    assert words in r.stderr and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.fixture(scope="session")
def quality(tmp_path_factory) -> dict:
    from backends.models.train import ensure_trained_model

    model = ensure_trained_model()
    out = tmp_path_factory.mktemp("quant-quality") / "q.json"
    r = run_cli("quant", "quality", "--model", str(model), "--vllm-schemes", "fp32,w8a8-int8",
                "--openvino-schemes", "fp32,w8a16-int8", "--windows", "2", "--window-len", "128",
                "--format", "json", "--out", str(out), timeout=2300)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout)  # stdout is pure JSON (vLLM's logs go to stderr)
    assert res == json.loads(out.read_text())
    return res


def test_every_engine_and_scheme_is_measured(quality):
    rows = {(r["engine"], r["scheme"]): r for r in quality["rows"]}
    assert list(rows) == [("transformers", "fp32"), ("vllm", "fp32"), ("vllm", "w8a8-int8"),
                          ("openvino", "fp32"), ("openvino", "w8a16-int8")]
    for r in rows.values():
        assert r["status"] == "measured", r
        assert r["positions"] == 2 * 127
        for k in ("perplexity", "perplexity_delta_pct", "token_agreement", "mean_abs_logprob_diff", "kl"):
            assert math.isfinite(r[k]), (k, r)
    assert rows["vllm", "fp32"]["kl_kind"] == "top-5, renormalized" and rows["openvino", "fp32"]["kl_kind"] == "full vocabulary"
    # a trained model: perplexity far below the vocabulary size (a random one is in the thousands)
    assert rows["transformers", "fp32"]["perplexity"] < 300


def test_fp32_engines_match_the_reference(quality):
    rows = {(r["engine"], r["scheme"]): r for r in quality["rows"]}
    for engine in ("vllm", "openvino"):
        r = rows[engine, "fp32"]
        assert abs(r["perplexity_delta_pct"]) < 0.5, r
        assert r["token_agreement"] >= 0.99 and r["mean_abs_logprob_diff"] < 0.01, r


def test_int8_schemes_loaded_and_cost_something(quality):
    rows = {(r["engine"], r["scheme"]): r for r in quality["rows"]}
    v = rows["vllm", "w8a8-int8"]
    assert v["loaded"]["valid"] is True and v["loaded"]["kernels"] == ["CPUInt8ScaledMMLinearKernel"]
    assert v["loaded"]["dtype"] == "bfloat16"  # the CPU int8 kernel takes 16-bit activations only
    o = rows["openvino", "w8a16-int8"]
    assert {"u8", "i8"} & set(o["loaded"]["weight_types"]), o["loaded"]
    for r in (v, o):
        # quantized numerics differ from the reference, but int8 keeps most greedy choices
        assert r["mean_abs_logprob_diff"] > rows[r["engine"], "fp32"]["mean_abs_logprob_diff"]
        assert r["token_agreement"] > 0.8 and abs(r["perplexity_delta_pct"]) < 25, r


def test_openvino_backend_takes_part_in_greedy_parity():
    """`compare run`'s quality step on the OpenVINO GenAI pipeline (no streamed logprobs): token
    agreement plus the reference-based divergence, against the fp32 transformers reference."""
    from transformers import AutoTokenizer

    from adapters.spec import ServingSpec
    from backends.models.train import ensure_trained_model, heldout_windows
    from backends.openvino.backend import OpenVINOBackend
    from compare.quality.deferred import collect, score
    from compare.quality.parity import QualityOptions
    from compare.running import aio
    from core.records import GenerationRequest

    model = ensure_trained_model()
    spec = ServingSpec(model=str(model), dtype="float32", quantization="w8a16-int8", max_model_len=256,
                       kv_cache_memory_bytes=32 << 20)
    windows = heldout_windows(AutoTokenizer.from_pretrained(str(model)), 2, 48)
    reqs = [GenerationRequest(request_id=f"p{i}", max_tokens=16, prompt_token_ids=tuple(w)) for i, w in enumerate(windows)]

    opts = QualityOptions(mode="auto", num_prompts=2, max_tokens=16)

    async def go():
        async with OpenVINOBackend(spec) as b:
            _, probed = await collect("openvino", b, spec, reqs, opts)
        assert probed is not None
        return (await score([probed], opts))["openvino"]  # the reference loads once the engine stopped

    q = aio.run(go())
    assert q.status == "measured", q
    assert q.top_k is None and "mean_abs_logprob_diff" not in q.model_fields_set  # nothing streamed to compare
    assert q.tokens == 32 and 0.5 <= q.token_agreement <= 1
    assert q.mean_reference_regret >= 0 and math.isfinite(q.reference_perplexity_of_output)
