"""``--client-procs 2`` against the real vLLM OpenAI server (the session's, tiny model on CPU): the same
records, per-request fields and level summaries as one client process."""
from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli

WORKLOAD = ("--num-requests", "6", "--input-len", "16", "--output-len", "12", "--concurrency", "4",
            "--rate", "20", "--warmup", "1")


@pytest.fixture
def vllm_url(served_vllm_url):  # the session's `vllm serve` of the tiny model (tests/conftest.py)
    return served_vllm_url


def _run(url, tiny_model, out, procs: str) -> tuple[dict, list[dict]]:
    p = run_cli("run", "--backends", f"openai@{url}", "--tokenizer", str(tiny_model), *WORKLOAD,
                "--client-procs", procs, "--out", str(out), "--run-id", f"p{procs}", "--format", "json")
    assert p.returncode == 0, p.stderr[-3000:]
    d = out / f"p{procs}"
    return (json.loads((d / "run.json").read_text()),
            [json.loads(x) for x in (d / "requests.jsonl").read_text().splitlines()])


HANDLING_SLACK_NS = 50_000_000  # how much later than its arrival the loop may handle an end, loaded machine


@pytest.mark.engine
def test_two_client_processes_measure_what_one_does(vllm_url, tiny_model, tmp_path):
    run1, recs1 = _run(vllm_url, tiny_model, tmp_path, "1")
    run2, recs2 = _run(vllm_url, tiny_model, tmp_path, "2")
    assert run1["client"]["client_procs"] == 1 and run2["client"]["client_procs"] == 2
    assert len(recs2) == len(recs1) == 12
    assert recs1[0].keys() == recs2[0].keys()  # one schema
    by1 = {(r["level"], r["request_id"]): r for r in recs1}
    by2 = {(r["level"], r["request_id"]): r for r in recs2}
    assert by1.keys() == by2.keys()
    for key, a in by1.items():
        b = by2[key]
        for field in ("ok", "error_kind", "finish_reason", "prompt_tokens", "requested_tokens", "token_ids",
                      "usage_completion_tokens", "backend", "repeat"):
            assert a.get(field) == b.get(field), (key, field)
        # how the server grouped tokens into events is its timing, not ours: only the total must match
        assert sum(a["event_token_counts"]) == sum(b["event_token_counts"]) == len(b["token_ids"]), key
        # the send stamp follows the write: on a loaded machine the first token can be read
        # before a busy client stamped its send (11.7 ms seen), never after the end
        assert b["t_sent_ns"] - HANDLING_SLACK_NS <= b["event_times_ns"][0] <= b["t_end_ns"]
    for level in ("r20",):  # open loop: each request scheduled at the same offset of its level
        t0_1 = min(r["t_scheduled_ns"] for r in recs1 if r["level"] == level)
        t0_2 = min(r["t_scheduled_ns"] for r in recs2 if r["level"] == level)
        assert ({k: r["t_scheduled_ns"] - t0_1 for k, r in by1.items() if k[0] == level}
                == {k: r["t_scheduled_ns"] - t0_2 for k, r in by2.items() if k[0] == level})
    for rec_list in (recs1, recs2):  # each level's records in completion order, as the client handled them:
        for level in ("c4", "r20"):  # an end is the arrival stamp of the receive thread, so two ends that
            ends = [r["t_end_ns"] for r in rec_list if r["level"] == level]  # arrive together may be
            worst = max((a - b for a, b in zip(ends, ends[1:])), default=0)  # handled the other way round
            assert worst <= HANDLING_SLACK_NS, (level, worst)
    (l1,) = run1["backends"].values()
    (l2,) = run2["backends"].values()
    for label in ("c4", "r20"):
        s1, s2 = l1["levels"][label], l2["levels"][label]
        for k in ("requests", "ok", "failed", "output_tokens", "input_tokens", "errors"):
            assert s1[k] == s2[k], (label, k)
        assert "client_procs" not in s1
        procs = s2["client_procs"]
        assert procs["n"] == 2 and sum(p["requests"] for p in procs["processes"]) == 6
        assert all(p["cpu_s"] > 0 and p["loop_lag_ms"]["samples"] > 0 for p in procs["processes"])
        assert s2["loop_lag_ms"]["max"] == max(p["loop_lag_ms"]["max"] for p in procs["processes"])
