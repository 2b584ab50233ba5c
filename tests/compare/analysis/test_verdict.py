"""compare/analysis/verdict.py: words, costs, quality deltas and caveats, on synthetic records."""
from __future__ import annotations

import json

import pytest

from core.errors import UserError
from compare.analysis.verdict import build_verdict, decision_rows, header_line, summary_lines
from tests.synth import make_run, records


def _verdict(b_kw=None, repeats=3, **kw):
    cells = {"vllm": [records("vllm", "c1", k) for k in range(repeats)],
             "hf": [records("hf", "c1", k, seed=5, **(b_kw or {})) for k in range(repeats)]}
    run, recs = make_run(cells)
    for mutate in kw.pop("mutate", []):
        mutate(run)
    return run, build_verdict(run, recs, **kw)


def test_winner_and_no_significant_difference_in_plain_words():
    run, v = _verdict(b_kw={"ttft_ms": 40.0})
    rows = {r[1]: r for r in decision_rows(v)}
    assert rows["TTFT p50"][-1].startswith("vllm ") and "lower" in rows["TTFT p50"][-1]
    assert rows["TPOT p50"][-1].startswith("no significant difference")
    text = " ".join(summary_lines(v))
    assert "TTFT p50 vllm" in text and "no significant difference in" in text
    assert "reference vllm" in header_line(v) and "vllm=none" in header_line(v)
    json.dumps(v.as_dict())  # the verdict goes into `compare run --format json`


def test_cost_per_million_output_tokens():
    run, v = _verdict(gpu_hour_price=3.6)
    tps = run["backends"]["vllm"]["levels"]["c1"]["output_tok_s"]
    assert v.costs["vllm"]["c1"] == pytest.approx(3.6 / (tps * 3600) * 1e6)
    assert any("cost per million output tokens" in s for s in summary_lines(v))


def test_quality_delta_when_present():
    def add_quality(run):
        ref = {"model": "/m", "framework": "transformers", "dtype": "float32", "device": "cpu"}
        run["backends"]["vllm"]["quality"] = {"status": "measured", "reference": ref, "prompts": 2,
                                              "token_agreement": 1.0, "accuracy": _accuracy(1.0)}
        run["backends"]["hf"]["quality"] = {"status": "measured", "reference": ref, "prompts": 2,
                                            "token_agreement": 0.9, "accuracy": _accuracy(0.5)}

    _, v = _verdict(mutate=[add_quality])
    line = next(q for q in v.quality if q.startswith("hf"))
    assert line.startswith("hf (vs the float32 reference on cpu, scored after the engines stopped): "
                           "token_agreement 0.9 (delta vs vllm -0.1), accuracy.n 2 (delta vs vllm +0), ")
    assert "accuracy.accuracy 0.5 (delta vs vllm -0.5)" in line and "prompts" not in line
    _, v = _verdict()
    assert "no quality results" in v.quality[0]


def _accuracy(acc: float) -> dict:
    return {"n": 2, "accuracy": acc, "reference_accuracy": 1.0, "difference": acc - 1.0, "mcnemar_p": 1.0,
            "discordant": {"only_reference_correct": 0, "only_candidate_correct": 0}, "test": "exact McNemar"}


def test_a_quality_entry_of_another_shape_is_refused():
    """The entry is closed: a figure no writer produces, or a status it does not know, fails where the
    run is read (one line from the CLI), instead of a report that silently leaves it out."""
    for bad in ({"status": "measured", "greedy_token_agreement": 1.0}, {"status": "done"},
                {"status": "measured", "token_agreement": "high"}):
        def put(run, bad=bad):
            run["backends"]["vllm"]["quality"] = bad

        with pytest.raises(UserError, match=r"backends\.vllm\.quality"):
            _verdict(mutate=[put])


def test_caveats_travel_into_the_verdict():
    def lag(run):
        s = run["backends"]["hf"]["repeats"][1]["levels"]["c1"]
        s["client_lagged"], s["loop_lag_ms"] = True, {"max": 120.0}
        run["backends"]["hf"]["levels"]["c1"].update(client_lagged=True, loop_lag_ms={"max": 120.0})

    def not_forced(run):
        run["workload"]["ignore_eos"] = True
        run["backends"]["hf"]["capabilities"]["forced_output_length"] = False

    def failures(run):
        run["backends"]["vllm"]["levels"]["c1"].update(failed=2, errors={"timeout": 2})

    def quant(run):
        run["backend_specs"] = {"hf": {"quantization": "w8a8-int8"}}

    _, v = _verdict(mutate=[lag, not_forced, failures, quant])
    text = "\n".join(v.caveats)
    # an older run's record (no client_health): said by its loop lag
    assert "client fell behind (hf c1 loop lag max 120 ms)" in text and "hf c1 repeat 2: loop lag max 120 ms" in text
    assert "output length cannot be forced" in text
    assert "2 failed request(s)" in text
    assert "different quantizations" in text
    assert v.as_dict()["caveats"] == v.caveats


def test_one_repeat_says_point_estimate():
    _, v = _verdict(b_kw={"ttft_ms": 40.0}, repeats=1)
    assert all(c.ci is None for c in v.comparisons)
    assert any("fewer than 2 repeats" in c for c in v.caveats)
    assert "point estimate" in decision_rows(v)[0][-1]
    assert "point estimates, no CI" in summary_lines(v)[0]


def test_an_slo_nobody_meets_still_ranks_the_columns():
    """A `--vary` run whose columns all miss the SLO: the headline says which is closest, where,
    how far over the limit, and by how much it beats each other column at that load."""
    from compare.analysis.headline import headlines
    from compare.analysis.metrics import summarize
    from core.results import RunResults
    from core.slo import SLO

    slo = SLO.parse("ttft_p95=10ms")
    a, b = "vllm[block_size=16]", "vllm[block_size=32]"
    cells = {a: [records(a, "c1", k, ttft_ms=20.0) for k in range(3)],
             b: [records(b, "c1", k, ttft_ms=40.0, seed=5) for k in range(3)]}
    run, recs = make_run(cells, slo=slo.to_json())
    for name, reps in cells.items():  # the summaries as the runner writes them under an SLO
        pooled = [r for rep in reps for r in rep]
        run["backends"][name]["levels"]["c1"] = summarize(pooled, max(r.t_end_ns for r in pooled),
                                                          slo).model_dump(exclude_unset=True)
    v = build_verdict(run, recs)
    (line,) = headlines(RunResults.model_validate(run), v)
    x_a = run["backends"][a]["levels"]["c1"]["slo_checks"]["ttft_p95"]["value_ms"]
    x_b = run["backends"][b]["levels"]["c1"]["slo_checks"]["ttft_p95"]["value_ms"]
    assert line.startswith(f"TTFT p95 <= 10.0 ms: no backend meets it at any load; closest: {a}, "
                           f"{x_a:.1f} ms at c1 ("), line
    assert f"lower than {b}'s {x_b:.1f} ms (significant, p=" in line, line
    assert f"{(1 - x_a / x_b) * 100:.0f}% lower" in line or f"{x_b / x_a:.1f}x lower" in line


STALL = [2.0] * 6 + [23.0]  # the same 5 ms mean gap (TPOT) as records()' default, one long stall per request


def _itl_run(slo):
    cells = {"vllm": [records("vllm", "c1", k, noise=0.05) for k in range(3)],
             "hf": [records("hf", "c1", k, seed=5, noise=0.05, gaps_ms=STALL) for k in range(3)]}
    return make_run(cells, slo=slo)


def test_itl_is_compared_when_the_slo_limits_it():
    from core.slo import SLO

    run, recs = _itl_run(SLO.parse("ttft_p95=2s,itl_p99=50ms").to_json())
    v = build_verdict(run, recs)
    by = {c.metric: c for c in v.comparisons}
    assert {"itl_p50", "itl_p95", "itl_p99"} <= set(by)  # p50/p95 and the SLO's own percentile
    # the stall each hf request makes: its tail gaps are ~23 ms against vllm's ~5 ms, its median 2 ms
    assert by["itl_p95"].winner == "vllm" and by["itl_p95"].b_value > 3 * by["itl_p95"].a_value
    assert by["itl_p50"].winner == "hf" and by["itl_p50"].ratio < 0.5
    assert "paired bootstrap" in by["itl_p95"].method and by["itl_p95"].ci[0] > 1.0
    assert not by["tpot_p50"].significant  # TPOT (each request's mean gap) does not see it
    rows = {r[1] for r in decision_rows(v)}
    assert {"ITL p50", "ITL p95"} <= rows
    json.dumps(v.as_dict())


def test_itl_is_left_out_without_an_itl_term():
    from core.slo import SLO

    for slo in (None, SLO.parse("ttft_p95=2s").to_json()):
        run, recs = _itl_run(slo)
        assert not any(c.metric.startswith("itl") for c in build_verdict(run, recs).comparisons)
