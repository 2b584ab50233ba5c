"""End to end: one `compare run` of a backend that forces output length against ``tgi@URL`` served by
the TGI-protocol TEST DOUBLE (real vLLM engine behind TGI's wire protocol, no ignore_eos), on the
tiny model. run.json must carry a consistent ``length_matched`` section, and the report must show
the '@k' rows.

Matching lengths is analysis of the records, so the forcing side is the fake engine (backends/fake/,
a test instrument: it streams exactly the requested tokens) and no engine starts here; the double is
the session's (tests/conftest.py ``tgi_url``). vLLM honouring ignore_eos in-process is the shared
run's (test_engines_e2e.py: every request streams exactly its requested tokens).
"""
from __future__ import annotations

import json

import pytest

from compare.analysis.length_match import stream_tokens
from core.records import RequestRecord
from tests.conftest import TINY_SPEC_ARGS, run_cli

pytestmark = [pytest.mark.engine, pytest.mark.timeout(1500)]  # the session's TGI double
FAKE = "fake"


def test_forced_length_vs_tgi_double_run_is_length_matched(tgi_url, tiny_model, tmp_path):
    tgi = f"tgi@{tgi_url}"
    # workload seed 8: on the tiny model one request's greedy output reaches EOS after ~21 tokens
    # (found with transformers; vLLM's numerics may differ, so the checks below hold either way)
    # a local backend beside a running server: --model names the model both serve (required)
    proc = run_cli("run", "--backends", f"{FAKE},{tgi}", "--native", "fake.ttft=5ms", "--native", "fake.itl=2ms",
                   "--model", str(tiny_model), *TINY_SPEC_ARGS, "--prompt-format", "text", "--num-requests", "6",
                   "--workload-seed", "8", "--output-len", "64", "--concurrency", "2", "--warmup", "1", "--out", str(tmp_path),
                   "--run-id", "lm", "--format", "json", timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    run = json.loads((tmp_path / "lm" / "run.json").read_text())
    assert run["backends"][tgi]["capabilities"]["forced_output_length"] is False
    lm = run["length_matched"]
    assert lm["reason"].startswith(f"{tgi}: output length cannot be forced")
    lines = (tmp_path / "lm" / "requests.jsonl").read_text().splitlines()
    recs = [RequestRecord.from_json(json.loads(x)) for x in lines]
    by = {(r.backend, r.request_id): r for r in recs if r.level == "c2"}
    level = lm["levels"]["c2"]
    assert level["requests"] == 6 and level["matched"] + level["excluded_failed"] + level["excluded_empty"] == 6
    assert level["matched"] >= 1
    for rid, k in level["k_by_request"].items():
        lens = {b: stream_tokens(by[(b, rid)]) for b in (FAKE, tgi)}
        assert lens[FAKE] == 64  # the forced length
        assert 1 <= k <= min(lens.values()) and k == min(lens.values())  # k = fewest streamed
    total = sum(level["k_by_request"].values())
    assert level["matched_tokens_per_backend"] == total
    for b in (FAKE, tgi):
        s = level["backends"][b]
        assert s["output_tokens"] == total  # the same matched tokens on both sides
        assert s["ok"] == level["matched"] and 0 < s["matched_fraction"] <= 1
        assert s["output_tok_s"] == pytest.approx(total / s["wall_s"])
        raw = run["backends"][b]["levels"]["c2"]
        # cut at token k: never later than the stream end, never more tokens than streamed
        assert s["e2e_ms"]["max"] <= raw["e2e_ms"]["max"] + 1e-9
        assert s["ttft_ms"]["min"] >= raw["ttft_ms"]["min"] - 1e-9
        assert s["streamed_tokens"] == sum(stream_tokens(r) for (bb, _), r in by.items()
                                           if bb == b and r.ok)
    # the verdict judged TPOT/E2E/throughput on the matched tokens, and says so
    v = out["verdict"]
    matched = level["backends"][FAKE]["output_tok_s"]
    assert any(c["label"] == "output tok/s @k" and c["a_value"] == pytest.approx(matched)
               for c in v["comparisons"] if c["level"] == "c2")
    assert any("length-matched" in c for c in v["caveats"])
    report = run_cli("report", str(tmp_path / "lm"))
    assert report.returncode == 0, report.stderr
    # the double's long name (tgi@URL) is shown by a short label, mapped once in the legend
    assert f"| {FAKE} | c2 @k |" in report.stdout and f"A = {tgi}" in report.stdout and "| A | c2 @k |" in report.stdout
    early = {rid: k for rid, k in level["k_by_request"].items() if k < 64}
    for rid in early:  # cut where the double stopped at EOS; the forced side ran on to 64
        assert by[(tgi, rid)].finish_reason == "stop"
    if early:
        assert level["backends"][FAKE]["matched_fraction"] < 1 == level["backends"][tgi]["matched_fraction"]
    print(f"requests that stopped at EOS on the double: {early or 'none'}")
