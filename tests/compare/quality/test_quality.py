"""Quality parity: the metric arithmetic, the paired test, and teacher-forced reference scoring
on the real transformers reference (tiny model, CPU, seconds)."""
from __future__ import annotations

import asyncio
import json
import math
import os

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
    assert p.tokens == 6 and p.token_agreement == round(5 / 6, 4)
    assert [x.first_divergence for x in p.per_prompt] == [2, None]
    assert p.exact_sequence_match == 0.5
    assert p.mean_first_divergence == (2 + 2) / 2  # an agreeing prompt counts its full length
    assert p.mean_logprob_diff == pytest.approx((4 * 0.5 + 2 * -0.5) / 6, abs=1e-5)
    assert p.mean_abs_logprob_diff == pytest.approx(0.5)
    assert "kl_topk" not in p.model_fields_set  # no top-k streamed: absent from run.json, not null


def test_truncated_kl_is_zero_for_identical_distributions_and_positive_otherwise():
    top = {7: math.log(0.6), 8: math.log(0.3)}
    same = parity([{"tokens": [7], "logprobs": [top[7]], "top": [top]}], [_rows([7], want=dict(top))])
    assert same.kl_topk == pytest.approx(0.0, abs=1e-9)
    shifted = {7: math.log(0.3), 8: math.log(0.6)}
    diff = parity([{"tokens": [7], "logprobs": [top[7]], "top": [top]}], [_rows([8], want=shifted)])
    assert diff.kl_topk is not None and diff.kl_topk > 0.1


def test_mcnemar_exact():
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(5, 5) == 1.0
    # 10 discordant pairs all one way: 2 * 0.5**10
    assert mcnemar_exact(10, 0) == pytest.approx(2 / 1024)
    a = accuracy([True, False, True, True], [True, True, True, False])
    assert a.accuracy == 0.75 and a.reference_accuracy == 0.75 and a.difference == 0.0
    assert (a.discordant.only_reference_correct, a.discordant.only_candidate_correct) == (1, 1)


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
    bad.write_text('{"prompt": ["x"], "answer": 4}\n')  # (no longer turned into the strings "['x']" and "4")
    with pytest.raises(UserError, match=r"bad.jsonl:1: expected a JSON object with \"prompt\" and \"answer\" strings"):
        load_accuracy_jsonl(bad)
    os.mkfifo(tmp_path / "fifo.jsonl")
    with pytest.raises(UserError, match=r"fifo.jsonl is not a regular file \(a pipe or device\)"):
        load_accuracy_jsonl(tmp_path / "fifo.jsonl")
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
    from backends.hf.reference import HFBackend

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
    assert p.token_agreement == 1.0 and p.per_prompt[0].first_divergence is None
    assert all(r["logprob"] == r["argmax_logprob"] <= 0 for r in rows)
    assert all(set(r["want"]) == {r["token"], 5} for r in rows)
    assert parity([{"tokens": bad}], [rows_bad]).per_prompt[0].first_divergence == 5


@pytest.mark.engine  # the transformers engine
def test_accuracy_task_runs_on_real_backends_with_a_paired_test(tiny_model):
    """The accuracy path end to end on the real transformers backend (as candidate and reference):
    the candidate answers while it runs, the reference scores after it stopped; answers are the
    model's own first output line for one prompt and a wrong one for the other."""
    from backends.hf.reference import HFBackend
    from compare.quality.deferred import collect, score
    from compare.quality.parity import _probe

    spec = ServingSpec(model=str(tiny_model), dtype="float32")

    async def go():
        async with HFBackend(spec) as cand:
            tok = cand._tok
            req = GenerationRequest("a", 16, prompt_token_ids=tuple(tok("def main():")["input_ids"]), ignore_eos=False)
            own = tok.decode((await _probe(cand, req, 60))["tokens"], skip_special_tokens=True)
            first = next((ln for ln in own.strip().splitlines() if ln.strip()), "")
            opts = QualityOptions(mode="on", num_prompts=1, max_tokens=8, device="cpu",
                                  accuracy=(("def main():", first), ("import os", "\u2603 never")))
            now, probed = await collect("hf", cand, spec, [req], opts, 60)
        assert now.status == "pending" and probed is not None and len(probed.answers) == 2
        return first, (await score([probed], opts))["hf"]

    first, q = asyncio.run(go())
    assert q.status == "measured" and q.reference is not None and q.reference.device == "cpu"
    assert q.token_agreement == 1.0  # the same fp32 weights on the same framework
    acc = q.accuracy
    assert acc is not None and acc.n == 2
    assert acc.accuracy == acc.reference_accuracy == (0.5 if first.strip() else 0.0)
    assert acc.mcnemar_p == 1.0 and acc.test.startswith("exact McNemar")


def test_reference_placement_never_overcommits_a_device():
    """The float32 reference goes to the GPU only when its free memory holds it, else the CPU when
    RAM does, else nowhere with both figures in the reason; a forced place that cannot hold it says so."""
    from compare.quality.deferred import choose_device

    G = 2**30
    assert choose_device(30 * G, "auto", 100 * G, 64 * G)[0] == "cuda"
    dev, why = choose_device(30 * G, "auto", 20 * G, 64 * G)  # an engine (or anything) still holds the GPU
    assert dev == "cpu" and "GPU free 20.0 GB" in why
    dev, why = choose_device(30 * G, "auto", 20 * G, 16 * G)
    assert dev is None and why.startswith("skipped") and "30.0 GB" in why and "--quality off" in why
    assert choose_device(30 * G, "auto", None, 64 * G)[0] == "cpu"  # no GPU at all
    assert choose_device(30 * G, "cuda", 20 * G, 64 * G)[0] is None
    assert choose_device(30 * G, "cuda", None, 64 * G)[0] is None
    assert choose_device(30 * G, "cpu", 100 * G, 64 * G)[0] == "cpu"
    assert choose_device(None, "auto", None, None)[0] == "cpu"


def test_reference_size_is_read_from_the_safetensors_headers(tiny_model):
    import torch
    from transformers import AutoModelForCausalLM

    from backends.models.probe import parameter_count
    from compare.quality.deferred import reference_bytes

    n = parameter_count(tiny_model)
    m = AutoModelForCausalLM.from_pretrained(str(tiny_model), dtype=torch.float32)
    # tied embeddings are stored once in the file and counted once by parameters()
    assert n == sum(p.numel() for p in m.parameters())
    assert reference_bytes(str(tiny_model)) > 4 * n
    assert parameter_count(tiny_model / "no-such-dir") is None


def test_probes_with_ids_the_stream_left_out_fail_with_a_reason_not_an_index_error(tiny_model):
    """A stream that sends some tokens without their id (-1: llama-server's held UTF-8 tokens,
    a text-only OpenAI stream) cannot be teacher-forced: quality fails at collection, naming why,
    instead of the reference later raising IndexError on the id. A protocol double (a stream
    of fixed events), not an engine: the real llama.cpp probes are unary and carry every id
    (tests/compare/running/test_llamacpp_e2e.py)."""
    from compare.quality.deferred import collect
    from core.records import Capabilities, StreamEnd

    class LeavesIdsOut:  # test double: only the stream shape matters here
        name = "partial"
        unary_quality_probes = False
        capabilities = Capabilities(logprobs=False)

        async def stream(self, req, ctx=None):
            yield TokenEvent(1, (5, -1, 7))
            yield StreamEnd(2, "length")

    spec = ServingSpec(model=str(tiny_model), dtype="bfloat16")
    req = GenerationRequest("a", 3, prompt_token_ids=(1, 2, 3))
    now, probed = asyncio.run(collect("partial", LeavesIdsOut(), spec, [req], QualityOptions(mode="on"), 10))
    assert probed is None and now.status == "failed"
    assert "1 of the probes' generated tokens came without their id from partial's stream" in now.reason
