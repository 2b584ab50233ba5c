"""``compare run --vary max_num_seqs=1,4 --require-slo``: two columns, each with its own spec reaching
the engine, compared by the verdict, the SLO as pass/fail; then the same results re-checked,
reported and gated under the variants' names (no further engine start). Variants are orchestration:
this runs on the fake engine (backends/fake/, a test instrument), whose sequence slots follow the
spec's max_num_seqs, so a variant that did not reach the engine shows in the timings. How vLLM maps
max_num_seqs is tests/adapters' subject, what it does with it the real-engine tests'."""
from __future__ import annotations

import json

import pytest

from compare.analysis.verdict import verdict_from_results
from tests.conftest import cli

A, B = "fake[max_num_seqs=1]", "fake[max_num_seqs=4]"


@pytest.fixture(scope="module")
def vary_run(tmp_path_factory, tiny_model):
    out = tmp_path_factory.mktemp("vary")
    # 20 ms to the first token, 5 ms per token: one request holds a slot for 55 ms
    p = cli("run", "--backends", "fake", "--native", "fake.ttft=20ms", "--native", "fake.itl=5ms",
                "--model", str(tiny_model), "--vary", "max_num_seqs=1,4", "--concurrency", "4", "--num-requests", "4", "--input-len", "16",
                "--output-len", "8", "--warmup", "1", "--slo", "ttft_p95=1us", "--require-slo",
                "--gpu-hour-price", "2", "--out", str(out), "--run-id", "vary")
    return p, out / "vary"


def test_each_variant_is_a_column_with_its_own_engine_config_and_the_verdict_compares_them(vary_run):
    p, d = vary_run
    run = json.loads((d / "run.json").read_text())
    assert run["status"] == "complete", p.stderr[-3000:]
    assert list(run["backends"]) == [A, B]
    assert {n: s["max_num_seqs"] for n, s in run["backend_specs"].items()} == {A: 1, B: 4}
    assert run["variants"]["columns"][A] == {"backend": "fake", "overrides": {"max_num_seqs": 1}, "base_value": []}
    for name, seqs in ((A, 1), (B, 4)):  # what the engine itself resolved, not what we asked
        assert run["backends"][name]["describe"]["native_config"]["resolved"]["max_num_seqs"] == seqs
        assert run["backends"][name]["levels"]["c4"]["ok"] == 4
    # one slot: the 4 concurrent requests queue (the last waits 3 x 55 ms); four slots: none waits
    ttft = {n: run["backends"][n]["levels"]["c4"]["ttft_ms"]["p95"] for n in (A, B)}
    assert ttft[A] >= 150 and 20 <= ttft[B] < 100, ttft
    v = verdict_from_results(d)
    assert v.reference == A and v.backends == [A, B] and v.comparisons
    assert all((c.a, c.b) == (A, B) for c in v.comparisons)
    assert f"A = {A}" in p.stdout and f"B = {B}" in p.stdout  # long names get a legend, brackets intact
    assert "cost per million output tokens at $2/device-hour, A (1 device): c4 $" in p.stdout


def test_require_slo_exits_1_with_one_line_per_miss_and_keeps_the_results(vary_run):
    p, d = vary_run
    assert p.returncode == 1, p.stderr[-3000:]
    lines = [x.strip() for x in p.stderr.splitlines() if "c4: ttft_p95" in x]
    assert len(lines) == 2 and lines[0].startswith(f"{A} c4: ttft_p95 ") and " > 1 us (" in lines[0], p.stderr
    assert lines[1].startswith(f"{B} c4: ttft_p95 ")
    assert "Traceback" not in p.stderr and (d / "requests.jsonl").exists()


def test_existing_results_rechecked_reported_and_gated_under_variant_names(vary_run, tmp_path):
    _, d = vary_run
    assert cli("report", str(d), "--require-slo", "ttft_p95=1000s,tpot_p95=1000s").returncode == 0
    p = cli("report", str(d), "--require-slo")  # the run's own (impossible) SLO
    assert p.returncode == 1 and f"{A} c4: ttft_p95" in p.stderr and f"A = {A}" in p.stdout
    assert cli("baseline", "save", str(d), "--name", "v", "--dir", str(tmp_path)).returncode == 0
    p = cli("check", str(d), "--baseline", "v", "--dir", str(tmp_path), "--backends", A)
    assert p.returncode == 0 and "RESULT: PASS" in p.stdout, p.stdout + p.stderr
