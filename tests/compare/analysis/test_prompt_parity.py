"""Prompt parity: whether every backend's engine counted the same prompt lengths, per request.
Records built here (the arithmetic); the real disagreement it exists for (OpenVINO's converted
tokenizer on chat prompts) is in docs/engines.md."""
from __future__ import annotations

from compare.analysis.caveats import caveats
from compare.analysis.prompt_parity import prompt_parity, words
from core.records import RequestRecord
from core.results import RunResults


def rec(backend: str, rid: str, prompt: int | None, *, level: str = "c1", error: str | None = None) -> RequestRecord:
    return RequestRecord(request_id=rid, backend=backend, level=level, t_sent_ns=0, event_times_ns=(5,),
                         event_token_counts=(1,), token_ids=(1,), t_end_ns=6, finish_reason="length",
                         prompt_tokens=prompt, requested_tokens=1, usage_completion_tokens=1, error_kind=error)


def test_the_backend_off_the_majority_is_named_with_its_deltas():
    recs = [rec(b, rid, n) for rid, counts in {"r0": (34, 34, 34), "r1": (41, 41, 41), "r2": (35, 34, 35),
                                                "r3": (38, 37, 38)}.items()
            for b, n in zip(("hf", "openvino", "llamacpp"), counts)]
    recs += [rec("openvino", "r2", 34, level="c4")]  # another level: the same prompt, counted once
    p = prompt_parity(recs)
    assert p is not None and p.requests == 4 and set(p.backends) == {"openvino"}
    d = p.backends["openvino"]
    assert (d.compared, d.differing, d.min_delta, d.max_delta) == (4, 2, -1, -1)
    (w,) = words(p, "chat")
    assert w.startswith("openvino: its engine counted another prompt length than the other backends on 2 of 4")
    assert "(-1 token)" in w and "--prompt-format token_ids" in w
    assert "--prompt-format" not in words(p, "token_ids")[0]  # already identical ids: no such advice


def test_two_backends_that_disagree_are_both_named_without_a_delta():
    p = prompt_parity([rec("a", "r0", 10), rec("b", "r0", 12), rec("a", "r1", 9), rec("b", "r1", 9)])
    assert p is not None and set(p.backends) == {"a", "b"}
    assert all(d.differing == 1 and d.compared == 2 and d.min_delta is None for d in p.backends.values())
    assert words(p, "text") == ["a and b: their engines counted different prompt lengths on 1 of 2 request(s): "
                                "their tokenizers or chat templates differ, so their latencies are for different "
                                "prompts; --prompt-format token_ids sends every engine the same ids"]


def test_nothing_to_compare_and_failed_or_uncounted_requests_are_left_out():
    assert prompt_parity([rec("a", "r0", 10), rec("a", "r1", 11)]) is None  # one backend
    assert prompt_parity([rec("a", "r0", 10), rec("b", "r0", None)]) is None  # b reports no count
    p = prompt_parity([rec("a", "r0", 10), rec("b", "r0", 10), rec("b", "r1", 3, error="http_5xx"),
                       rec("a", "r1", 9)])
    assert p is not None and p.requests == 1 and p.backends == {}


def test_the_caveat_reaches_the_run_and_older_runs_have_none():
    p = prompt_parity([rec("a", "r0", 10), rec("b", "r0", 10), rec("c", "r0", 11)])
    base = {"run_id": "x", "status": "complete", "workload": {"prompt_format": "chat"}}
    run = RunResults.model_validate({**base, "prompt_parity": p.model_dump()})
    assert any(c.startswith("c: its engine counted another prompt length") for c in caveats(run))
    assert not any("prompt length" in c for c in caveats(RunResults.model_validate(base)))
