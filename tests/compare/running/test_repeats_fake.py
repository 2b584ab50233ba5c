"""``--repeats``: each repeat restarts every engine, the backends interleaved A B A B; each repeat's
levels are kept and pooled, and the verdict gets intervals from them. That is the runner's and the
statistics' logic, so it runs on the fake engine (backends/fake/, a test instrument) with two knob
variants as the two backends; engine restarts on real engines are every real-engine test's."""
from __future__ import annotations

import json

import pytest

from tests.conftest import cli

A, B = "fake[max_model_len=256]", "fake[max_model_len=512]"
N = 4


@pytest.fixture(scope="module")
def repeated(tmp_path_factory, tiny_model):
    out = tmp_path_factory.mktemp("repeats")
    p = cli("run", "--backends", "fake", "--native", "fake.ttft=5ms", "--native", "fake.itl=2ms",
                "--model", str(tiny_model), "--vary", "max_model_len=256,512", "--repeats", "2",
                "--num-requests", str(N), "--input-len", "16", "--output-len", "8", "--concurrency", "2",
                "--rate", "50", "--warmup", "1", "--gpu-hour-price", "2.5", "--out", str(out), "--run-id", "rep",
                "--format", "json")
    assert p.returncode == 0, p.stderr[-3000:]
    return out / "rep", json.loads(p.stdout)


def test_repeats_are_interleaved_and_stored_per_repeat(repeated):
    d, out = repeated
    assert out["repeats"] == 2 and list(out["backends"]) == [A, B]
    for name in (A, B):
        reps = out["backends"][name]["repeats"]
        assert [r["repeat"] for r in reps] == [0, 1] and all(r["status"] == "complete" for r in reps)
        assert all(r["levels"]["c2"]["ok"] == N and r["levels"]["r50"]["ok"] == N for r in reps)
        pooled = out["backends"][name]["levels"]
        assert pooled["c2"]["requests"] == 2 * N and pooled["c2"]["repeats"] == 2  # pooled over both
    order = []
    for line in (d / "requests.jsonl").read_text().splitlines():
        rec = json.loads(line)
        key = (rec["backend"], rec["repeat"])
        if not order or order[-1] != key:
            order.append(key)
    assert order == [(A, 0), (B, 0), (A, 1), (B, 1)]  # A B A B
    # every repeat follows the level's one seeded open-loop schedule
    schedules = [r["levels"]["r50"]["schedule_offsets_ns"] for n in (A, B) for r in out["backends"][n]["repeats"]]
    assert len(schedules) == 4 and all(s == schedules[0] for s in schedules)


def test_two_repeats_give_the_verdict_intervals(repeated):
    _, out = repeated
    v = out["verdict"]
    assert v["reference"] == A and v["comparisons"]
    assert all(c["ci"] is not None for c in v["comparisons"])  # 2 repeats: intervals exist
    assert v["cost_per_million_output_tokens"][A]["c2"] > 0
