"""Quality parity: the metric arithmetic, the paired test, and teacher-forced reference scoring
on the real transformers reference (tiny model, CPU, seconds)."""
from __future__ import annotations

import asyncio
import json
import math

import pytest

from adapters.spec import ServingSpec
from core.records import GenerationRequest, TokenEvent
from core.errors import UserError
from compare.quality.parity import (
    QualityOptions, accuracy, is_correct, load_accuracy_jsonl, mcnemar_exact, parity, wanted,
)


def _rows(argmax: list[int], lp: float = -1.0, want: dict | None = None) -> list[dict]:
    return [{"argmax": a, "logprob": lp, "argmax_logprob": lp, "want": want or {}} for a in argmax]


def test_parity_agreement_divergence_and_logprob_diff():
    samples = [{"tokens": [1, 2, 3, 4], "logprobs": [-0.5] * 4},  # diverges at position 2
               {"tokens": [5, 6], "logprobs": [-1.5, -1.5]}]  # agrees fully
    scores = [_rows([1, 2, 9, 4], lp=-1.0), _rows([5, 6], lp=-1.0)]
    p = parity(samples, scores)
    assert p["tokens"] == 6 and p["token_agreement"] == round(5 / 6, 4)
    assert [x["first_divergence"] for x in p["per_prompt"]] == [2, None]
    assert p["exact_sequence_match"] == 0.5
    assert p["mean_first_divergence"] == (2 + 2) / 2  # an agreeing prompt counts its full length
    assert p["mean_logprob_diff"] == pytest.approx((4 * 0.5 + 2 * -0.5) / 6, abs=1e-5)
    assert p["mean_abs_logprob_diff"] == pytest.approx(0.5)
    assert "kl_topk" not in p  # no top-k streamed


def test_truncated_kl_is_zero_for_identical_distributions_and_positive_otherwise():
    top = {7: math.log(0.6), 8: math.log(0.3)}
    same = parity([{"tokens": [7], "logprobs": [top[7]], "top": [top]}], [_rows([7], want=dict(top))])
    assert same["kl_topk"] == pytest.approx(0.0, abs=1e-9)
    shifted = {7: math.log(0.3), 8: math.log(0.6)}
    diff = parity([{"tokens": [7], "logprobs": [top[7]], "top": [top]}], [_rows([8], want=shifted)])
    assert diff["kl_topk"] > 0.1


def test_mcnemar_exact():
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(5, 5) == 1.0
    # 10 discordant pairs all one way: 2 * 0.5**10
    assert mcnemar_exact(10, 0) == pytest.approx(2 / 1024)
    a = accuracy([True, False, True, True], [True, True, True, False])
    assert a["accuracy"] == 0.75 and a["reference_accuracy"] == 0.75 and a["difference"] == 0.0
    assert a["discordant"] == {"only_reference_correct": 1, "only_candidate_correct": 1}


def test_exact_match_uses_the_first_nonempty_line():
    assert is_correct("\n  Paris \nmore text", "paris")
    assert not is_correct("Paris is the capital", "Paris")


def test_accuracy_jsonl_bad_input(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        load_accuracy_jsonl(tmp_path / "none.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "x"}\n')
    with pytest.raises(UserError, match=r"bad.jsonl:1"):
        load_accuracy_jsonl(bad)
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({"prompt": "2+2=", "answer": "4"}) + "\n\n")
    assert load_accuracy_jsonl(good) == (("2+2=", "4"),)


def test_quality_is_refused_for_dummy_weights_and_skipped_for_plain_fp32(tiny_model):
    why = wanted(ServingSpec(model=str(tiny_model), load_format="dummy", quantization="w4a16-awq"),
                 QualityOptions(mode="on"))
    assert why and why.startswith("refused")
    assert wanted(ServingSpec(model=str(tiny_model), dtype="float32"), QualityOptions()).startswith("skipped")
    assert wanted(ServingSpec(model=str(tiny_model), dtype="bfloat16"), QualityOptions()) is None
    assert wanted(ServingSpec(model=str(tiny_model), dtype="float32"), QualityOptions(mode="on")) is None


@pytest.mark.engine  # the transformers engine
def test_teacher_forced_reference_reproduces_its_own_greedy_output(tiny_model):
    """The scorer's argmax under teacher forcing must be exactly what generate() produced greedily:
    agreement 1.0, no divergence. Then a corrupted continuation diverges where it was corrupted."""
    from backends.hf import HFBackend

    async def go():
        req = GenerationRequest("q", 12, prompt_token_ids=tuple(range(100, 140)))
        async with HFBackend(ServingSpec(model=str(tiny_model), dtype="float32")) as ref:
            toks = [t for ev in [e async for e in ref.stream(req)] if isinstance(ev, TokenEvent) for t in ev.token_ids]
            rows = await ref.score(req, toks, [[toks[i], 5] for i in range(len(toks))])
            bad = list(toks)
            bad[5] = (bad[5] + 1) % 4000
            rows_bad = await ref.score(req, bad)
        return toks, rows, bad, rows_bad

    toks, rows, bad, rows_bad = asyncio.run(go())
    assert len(toks) == 12
    p = parity([{"tokens": toks}], [rows])
    assert p["token_agreement"] == 1.0 and p["per_prompt"][0]["first_divergence"] is None
    assert all(r["logprob"] == r["argmax_logprob"] <= 0 for r in rows)
    assert all(set(r["want"]) == {r["token"], 5} for r in rows)
    assert parity([{"tokens": bad}], [rows_bad])["per_prompt"][0]["first_divergence"] == 5


@pytest.mark.engine  # the transformers engine
def test_accuracy_task_runs_on_real_backends_with_a_paired_test(tiny_model):
    """The accuracy path end to end on the real transformers backend (as candidate and reference):
    answers are the model's own first output line for one prompt and a wrong one for the other."""
    from backends.hf import HFBackend
    from compare.quality.parity import _accuracy, _probe

    async def go():
        async with HFBackend(ServingSpec(model=str(tiny_model), dtype="float32")) as ref:
            tok = ref._tok
            req = GenerationRequest("a", 16, prompt_token_ids=tuple(tok("def main():")["input_ids"]), ignore_eos=False)
            own = tok.decode((await _probe(ref, req, 60))["tokens"], skip_special_tokens=True)
            first = next((ln for ln in own.strip().splitlines() if ln.strip()), "")
            opts = QualityOptions(accuracy=(("def main():", first), ("import os", "\u2603 never")))
            return first, await _accuracy(ref, ref, opts, 60)

    first, acc = asyncio.run(go())
    assert acc["n"] == 2
    assert acc["accuracy"] == acc["reference_accuracy"] == (0.5 if first.strip() else 0.0)
    assert acc["mcnemar_p"] == 1.0 and acc["test"].startswith("exact McNemar")
