"""Length matching (compare/analysis/length_match.py) on synthetic records with integer ns times: the cut
at k, the matched k per request, exclusions, throughput over the matched window, the verdict and
the console/report rows built from it."""
from __future__ import annotations

import io
import json

import pytest

from compare.analysis.length_match import match_level, match_run, matched_inputs, reason, section, truncate
from compare.analysis.metrics import e2e_ns, itls_ns, tpot_ns, ttft_ns
from core.records import RequestRecord
from tests.synth import make_run

MS = 1_000_000


def rec(backend: str, rid: str, sent: int, times: list[int], counts: list[int] | None = None, *,
        level: str = "c1", repeat: int = 0, error: str | None = None, end_gap: int = 5) -> RequestRecord:
    counts = counts or [1] * len(times)
    n = sum(counts)
    return RequestRecord(request_id=rid, backend=backend, level=level, t_sent_ns=sent,
                         event_times_ns=tuple(times), event_token_counts=tuple(counts),
                         token_ids=tuple(range(n)), t_end_ns=(times[-1] if times else sent) + end_gap,
                         finish_reason=None if error else "length", prompt_tokens=4, requested_tokens=8,
                         usage_completion_tokens=n, error_kind=error, error="boom" if error else None,
                         repeat=repeat)


# ---------------------------------------------------------------- the cut


def test_truncate_keeps_the_multi_token_attribution():
    # 7 tokens in 4 events: 1 @100, 3 @110, 1 @130, 2 @160; sent at 0
    r = rec("a", "r", 0, [100, 110, 130, 160], [1, 3, 1, 2])
    full = itls_ns(r)
    assert full == [10, 0, 0, 20, 30, 0]
    for k in range(1, 8):
        c = truncate(r, k)
        assert sum(c.event_token_counts) == len(c.token_ids) == c.output_tokens == k
        assert itls_ns(c) == full[: k - 1]  # ITLs of tokens 2..k, same attribution as the raw metric
        assert ttft_ns(c) == 100  # TTFT unchanged
    c3 = truncate(r, 3)  # the 3rd token arrives inside the event at 110
    assert c3.event_times_ns == (100, 110) and c3.event_token_counts == (1, 2)
    assert e2e_ns(c3) == 110 and tpot_ns(c3) == (110 - 100) / 2
    c5 = truncate(r, 5)
    assert e2e_ns(c5) == 130 and tpot_ns(c5) == 30 / 4
    assert e2e_ns(truncate(r, 7)) == 160  # E2E@k ends at the k-th token, not at the stream's end
    assert tpot_ns(truncate(r, 1)) is None
    first_multi = truncate(rec("a", "r", 0, [50, 80], [3, 1]), 2)
    assert first_multi.event_token_counts == (2,) and itls_ns(first_multi) == [0] and tpot_ns(first_multi) == 0
    with pytest.raises(ValueError, match="only 7 were streamed"):
        truncate(r, 8)


# ---------------------------------------------------------------- one level


def _level():
    """A ran every request to 8 tokens; B hit EOS after 5 on r1 and failed r2; r3 missing on B."""
    a = [rec("A", f"r{i}", i * 1000, [i * 1000 + 100 + 10 * t for t in range(8)]) for i in range(4)]
    b = [rec("B", "r0", 0, [60, 70, 80, 90, 100, 110, 120], [2, 1, 1, 1, 1, 1, 1]),
         rec("B", "r1", 1000, [1050 + 20 * t for t in range(5)]),
         rec("B", "r2", 2000, [2100], error="timeout")]
    return a, b


def test_match_level_k_exclusions_and_per_backend_numbers():
    a, b = _level()
    m = match_level("c1", a + b)
    assert m.requests == 4 and m.k == {"r0": 8, "r1": 5}
    assert m.excluded_failed == 2 and m.excluded_empty == 0  # r2 failed on B, r3 missing on B
    A, B = m.pooled["A"], m.pooled["B"]
    assert A["output_tokens"] == B["output_tokens"] == 13  # the same tokens counted on both sides
    assert A["streamed_tokens"] == 32 and A["matched_fraction"] == pytest.approx(13 / 32)
    # A: r0 E2E@8 = 170, r1 E2E@5 = 1140 - 1000 = 140; window 0 .. 1140
    assert A["e2e_ms"]["max"] == pytest.approx(170 / MS) and A["e2e_ms"]["min"] == pytest.approx(140 / MS)
    assert A["wall_s"] == pytest.approx(1140e-9) and A["output_tok_s"] == pytest.approx(13 / 1140e-9)
    assert A["tpot_ms"]["mean"] == pytest.approx(10 / MS)
    # B: r0 events carry 2,1,1,1,1,1,1 tokens -> the 8th token is at 120; TPOT@8 = (120-60)/7;
    # r1 ended at EOS: its 5th token at 1130, E2E 130
    assert B["e2e_ms"]["min"] == pytest.approx(120 / MS) and B["e2e_ms"]["max"] == pytest.approx(130 / MS)
    assert B["tpot_ms"]["max"] == pytest.approx(20 / MS) and B["tpot_ms"]["min"] == pytest.approx(60 / 7 / MS)
    assert B["itl_ms"]["n"] == 7 + 4 and B["ttft_ms"]["min"] == pytest.approx(50 / MS)
    assert B["wall_s"] == pytest.approx((1130 - 0) * 1e-9)
    d = m.as_dict()
    assert d["matched"] == 2 and d["k"] == {"min": 5, "mean": 6.5, "max": 8} and d["k_by_request"]["r1"] == 5
    json.dumps(d)  # run.json-ready


def test_a_backend_with_no_token_excludes_the_request():
    m = match_level("c1", [rec("A", "r0", 0, [10, 20]), rec("B", "r0", 0, [], [])])
    assert m.k == {} and m.excluded_empty == 1 and m.pooled["A"]["ok"] == 0


def test_repeats_share_k_and_sum_windows():
    recs = [rec("A", "r0", 0, [10, 20, 30, 40], repeat=0), rec("A", "r0", 0, [10, 20, 30], repeat=1),
            rec("B", "r0", 0, [5, 15, 25, 35, 45, 55], repeat=0), rec("B", "r0", 0, [5, 10, 15, 20], repeat=1)]
    m = match_level("c1", recs)
    assert m.k == {"r0": 3}  # fewest over backends AND repeats
    assert m.per_repeat["A"][0]["output_tokens"] == m.per_repeat["A"][1]["output_tokens"] == 3
    assert m.pooled["B"]["wall_s"] == pytest.approx((25 + 15) * 1e-9)  # windows summed, as the raw pool
    assert set(m.as_dict()["backends"]["B"]["repeats"]) == {"0", "1"}


# ---------------------------------------------------------------- when it applies


def _run(caps_b: bool = True, ignore_eos: bool = True):
    a, b = _level()
    run, _ = make_run({"A": [a], "B": [b]}, workload={"name": "w", "seed": 0, "num_requests": 4,
                                                      "ignore_eos": ignore_eos})
    run["backends"]["B"]["capabilities"]["forced_output_length"] = caps_b
    return run, a + b


def test_reason_capability_or_observed_lengths():
    run, recs = _run(caps_b=False)
    assert "B: output length cannot be forced" in reason(run, recs)
    run, recs = _run(caps_b=True)
    assert reason(run, recs) == "observed output lengths differ for 1 request(s)"  # r1: 8 vs 5
    same = [rec(n, "r0", 0, [10, 20]) for n in ("A", "B")]
    assert reason(run, same) is None and match_run(run, same) is None and section(run, same) is None
    assert reason(run, [r for r in recs if r.backend == "A"]) is None  # one backend: nothing to match


def test_verdict_uses_length_matched_tpot_e2e_and_throughput():
    from compare.analysis.verdict import build_verdict

    # same per-token speed on both; B stops at EOS after 3 of 8 tokens on every request
    a = [rec("A", f"r{i}", i * 1000, [i * 1000 + 100 + 10 * t for t in range(8)]) for i in range(6)]
    b = [rec("B", f"r{i}", i * 1000, [i * 1000 + 100 + 10 * t for t in range(3)]) for i in range(6)]
    b[0] = rec("B", "r0", 0, [100, 110, 150])  # one slow token on B inside the matched range
    run, recs = make_run({"A": [a], "B": [b]})
    run["backends"]["B"]["capabilities"]["forced_output_length"] = False
    v = build_verdict(run, recs, metrics=("tpot_p95", "e2e_p95", "output_tok_s", "ttft_p50"))
    by = {c.metric: c for c in v.comparisons}
    levels = match_run(run, recs)
    mrun, cut = matched_inputs(run, levels)
    assert all(r.output_tokens == 3 for r in cut)
    assert by["e2e_p95"].a_value == pytest.approx(120 / MS)  # A cut at its 3rd token, not at 170
    assert by["tpot_p95"].b_value > by["tpot_p95"].a_value  # B's slow token counts, A's tail does not
    assert by["output_tok_s"].a_value == pytest.approx(levels["c1"].pooled["A"]["output_tok_s"])
    assert by["output_tok_s"].label.endswith("@k") and by["ttft_p50"].label == "TTFT p50"
    assert any("length-matched" in c for c in v.caveats)
    run["backends"]["B"]["capabilities"]["forced_output_length"] = True
    v2 = build_verdict(run, recs, metrics=("e2e_p95",))
    assert v2.comparisons[0].a_value == by["e2e_p95"].a_value  # forced, but lengths differ: matched too


def test_no_matching_when_lengths_were_forced_and_equal():
    from compare.analysis.verdict import build_verdict

    a = [rec("A", f"r{i}", i * 1000, [i * 1000 + 100 + 10 * t for t in range(4)]) for i in range(4)]
    b = [rec("B", f"r{i}", i * 1000, [i * 1000 + 50 + 20 * t for t in range(4)]) for i in range(4)]
    run, recs = make_run({"A": [a], "B": [b]})
    v = build_verdict(run, recs, metrics=("e2e_p95",))
    assert v.comparisons[0].a_value == pytest.approx(135 / MS)  # raw E2E: stream end, not token k
    assert not any("length-matched" in c for c in v.caveats)


# ---------------------------------------------------------------- console and report rows


def test_console_table_shows_matched_rows_under_the_raw_ones():
    from rich.console import Console

    from compare.analysis.caveats import caveats
    from compare.report.console import comparison_table

    run, recs = _run(caps_b=False)
    run["length_matched"] = section(run, recs)
    con = Console(file=io.StringIO(), width=250)
    con.print(comparison_table(run))
    text = con.file.getvalue()
    lines = [ln for ln in text.splitlines() if " c1 " in ln]
    assert [("@k" in ln) for ln in lines] == [False, True, False, True]  # raw, matched, raw, matched
    assert "'@k' rows are length-matched (B: output length cannot be forced" in text
    assert any("length-matched c1: 2 of 4 request(s) left out" in c for c in caveats(run))


def test_report_markdown_and_html_show_matched_rows(tmp_path):
    from compare.report import load_report_data, render_html, render_markdown

    run, recs = _run(caps_b=False)  # no section in run.json (an older run): computed from the records
    (tmp_path / "run.json").write_text(json.dumps(run))
    (tmp_path / "requests.jsonl").write_text("".join(json.dumps(r.to_json()) + "\n" for r in recs))
    d = load_report_data(tmp_path)
    md = render_markdown(d)
    assert "| A | c1 @k | 2/4 |" in md and "| B | c1 @k | 2/4 |" in md
    assert "'@k' rows are length-matched" in md
    html = render_html(d)
    assert "<td>c1 @k</td>" in html and "length-matched" in html
