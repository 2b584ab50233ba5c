"""``--requests-per-stream K``: a closed-loop level at concurrency C sends the workload's first
min(N, K*C) requests, the same prefix on every backend (orchestration only: the fake engine,
backends/fake/, a test instrument)."""
from __future__ import annotations

import json

import pytest

from compare.workload.schedule import LoadLevel, per_stream
from tests.conftest import cli


def test_each_closed_loop_level_takes_k_requests_per_stream_capped_at_the_workload():
    levels = per_stream([LoadLevel("concurrency", 1), LoadLevel("concurrency", 8), LoadLevel("rate", 2.0)], 3, 16)
    assert [lv.requests for lv in levels] == [3, 16, None]  # 3*1; min(16, 24); open loop keeps all
    assert levels[0].take(list(range(16))) == [0, 1, 2] and levels[2].take([5, 6]) == [5, 6]
    assert levels[0].as_dict() == {"kind": "concurrency", "value": 1, "label": "c1", "requests": 3}
    with pytest.raises(ValueError, match="at least one request"):
        LoadLevel("concurrency", 1, 0)


def test_a_run_sends_each_level_its_prefix_on_every_backend(tmp_path, tiny_model):
    backends = "fake@itl=1ms,fake@itl=2ms"
    p = cli("run", "--backends", backends, "--model", str(tiny_model), "--num-requests", "12",
                "--input-len", "8", "--output-len", "4", "--concurrency", "1,4,8", "--requests-per-stream", "2",
                "--warmup", "0", "--out", str(tmp_path), "--run-id", "r")
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads((tmp_path / "r" / "run.json").read_text())
    assert [lv["requests"] for lv in doc["levels"]] == [2, 8, 12]
    recs = [json.loads(x) for x in (tmp_path / "r" / "requests.jsonl").read_text().splitlines()]
    for b in backends.split(","):
        for label, n in (("c1", 2), ("c4", 8), ("c8", 12)):
            ids = sorted(r["request_id"] for r in recs if r["backend"] == b and r["level"] == label)
            assert len(ids) == n and doc["backends"][b]["levels"][label]["requests"] == n
            first = sorted(r["request_id"] for r in recs if r["backend"] == "fake@itl=1ms" and r["level"] == label)
            assert ids == first  # the same prefix of the workload on every backend


@pytest.mark.parametrize("extra, message", [
    (("--concurrency", "1", "--requests-per-stream", "0"), "each stream sends at least one request"),
    (("--rate", "2", "--requests-per-stream", "2"), "sizes closed-loop levels"),
])
def test_bad_requests_per_stream_is_one_line_exit_2(tmp_path, tiny_model, extra, message):
    p = cli("run", "--backends", "fake", "--model", str(tiny_model), *extra, "--out", str(tmp_path))
    assert p.returncode == 2 and message in p.stderr and "Traceback" not in p.stderr
    assert not any(tmp_path.iterdir())
