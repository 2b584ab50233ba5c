"""The runner's failure policy on the fake engine (backends/fake/, a test instrument that fails,
stalls and dies on command): failed requests are recorded by kind and the run goes on; a request
past --timeout is a timeout; an engine that dies mid-run ends its backend (the in-flight request
cancelled, the run partial, exit 1); one that cannot start is reported with its reason. What a
real engine does when it crashes is test_engines_e2e.py's."""
from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli

WORKLOAD = ("--num-requests", "20", "--input-len", "8", "--output-len", "4", "--concurrency", "2", "--warmup", "0")


@pytest.fixture
def run(tmp_path, tiny_model):
    def go(backend: str, run_id: str, *extra: str):
        p = run_cli("run", "--backends", backend, "--model", str(tiny_model), *WORKLOAD, *extra,
                    "--out", str(tmp_path), "--run-id", run_id, timeout=300)
        d = tmp_path / run_id
        recs = [json.loads(x) for x in (d / "requests.jsonl").read_text().splitlines()] \
            if (d / "requests.jsonl").exists() else []
        return p, json.loads((d / "run.json").read_text()), recs
    return go


def test_failed_requests_are_counted_by_kind_and_the_run_goes_on(run):
    p, doc, recs = run("fake@fail=0.3+itl=1ms", "a")
    assert p.returncode == 0, p.stderr[-2000:]
    level = doc["backends"]["fake@fail=0.3+itl=1ms"]["levels"]["c2"]
    failed = sorted(r["request_id"] for r in recs if r["error_kind"] == "engine")
    assert 0 < len(failed) < 20 and level["failed"] == len(failed) and level["ok"] == 20 - len(failed)
    assert level["errors"] == {"engine": len(failed)} and doc["status"] == "complete"
    assert f"c2: {len(failed)} failed request(s): {{'engine': {len(failed)}}}" in " ".join(p.stdout.split())
    _, _, again = run("fake@fail=0.3+itl=1ms", "b")  # the same requests fail: chosen by id
    assert sorted(r["request_id"] for r in again if r["error_kind"] == "engine") == failed


def test_a_request_past_the_timeout_is_a_timeout(run):
    p, doc, recs = run("fake@stall=3s+stall_frac=0.5+itl=1ms", "t", "--num-requests", "6", "--timeout", "1")
    assert p.returncode == 0, p.stderr[-2000:]
    level = doc["backends"]["fake@stall=3s+stall_frac=0.5+itl=1ms"]["levels"]["c2"]
    timed_out = [r for r in recs if r["error_kind"] == "timeout"]
    assert timed_out and level["errors"] == {"timeout": len(timed_out)} and level["ok"] == 6 - len(timed_out)


def test_an_engine_that_dies_ends_its_backend_and_the_run_is_partial(run):
    p, doc, recs = run("fake@die_after=5+itl=1ms", "d")
    assert p.returncode == 1, p.stderr[-2000:]
    b = doc["backends"]["fake@die_after=5+itl=1ms"]
    assert doc["status"] == "partial" and b["status"] == "failed"
    assert b["error"].startswith("the engine died mid-run") and "die_after=5" in b["error"]
    kinds = [r["error_kind"] for r in recs]
    assert "engine_dead" in kinds and len(recs) < 20  # nothing sent after the death


def test_an_engine_that_cannot_start_is_reported_with_its_reason(run):
    p, doc, recs = run("fake@start_fail=true", "s")
    assert p.returncode == 1 and not recs
    assert "✗ fake@start_fail=true failed: the fake engine did not start (start_fail is set)" in p.stdout
    assert "nothing was measured" in p.stdout and doc["backends"]["fake@start_fail=true"]["status"] == "failed"
