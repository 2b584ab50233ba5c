"""The fake engine (backends/fake/): a test instrument for orchestration, so its timing model must
hold exactly as configured, its options fail like any bad input, and its results say what it is."""
from __future__ import annotations

import asyncio
import json

import pytest

from adapters.spec import ServingSpec
from backends.fake.engine import FakeBackend
from backends.fake.model import FakeOptionError, timing_model
from core.errors import BackendRequestError, BackendStartError
from core.records import GenerationRequest, StreamEnd, TokenEvent
from tests.conftest import cli

SPEC = ServingSpec(model="unused")


def _req(i: int, n: int = 6) -> GenerationRequest:
    return GenerationRequest(request_id=f"r{i}", max_tokens=n, prompt_token_ids=(1, 2, 3, 4))


async def _collect(b: FakeBackend, req: GenerationRequest) -> tuple[int, list]:
    import time

    t0 = time.perf_counter_ns()
    items = []
    try:
        async for it in b.stream(req):
            items.append(it)
    except BackendRequestError as e:
        items.append(e)
    return t0, items


def test_options_from_target_and_native_spec_field_and_defaults():
    m = timing_model(ServingSpec(model="x", max_num_seqs=3, native={"fake": {"itl": "2ms", "ttft": 7}}),
                     "ttft=1.5s+fail=0.25")
    assert m.ttft == 1500.0 and m.itl == 2.0 and m.fail == 0.25 and m.seqs == 3
    assert timing_model(SPEC).seqs == 64 and timing_model(SPEC, "seqs=2,itl=1us").itl == 0.001


@pytest.mark.parametrize("target, words", [
    ("ttft=fast", "ttft='fast': expected a duration"), ("fail=2", "expected a number from 0 to 1"),
    ("speed=1", "unknown fake engine option(s) speed; known: ttft"), ("ttft", "is not KEY=VALUE"),
    ("seqs=0", "expected an integer >= 1"),
])
def test_bad_option_is_one_line_naming_it(target, words):
    with pytest.raises(FakeOptionError, match=None) as e:
        FakeBackend(SPEC, target=target)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_schedule_is_exact_and_slots_queue():
    """ttft then itl per token, stamped on schedule; with one slot the second request waits for
    the first to end."""
    async def go():
        async with FakeBackend(SPEC, target="ttft=30ms+itl=10ms+seqs=1") as b:
            (t0, a), (_, c) = await asyncio.gather(_collect(b, _req(0)), _collect(b, _req(1)))
        return t0, a, c
    t0, a, c = asyncio.run(go())
    ev = [x for x in a if isinstance(x, TokenEvent)]
    gaps = [y.t_ns - x.t_ns for x, y in zip(ev, ev[1:])]
    assert len(ev) == 6 and gaps == [10_000_000] * 5 and isinstance(a[-1], StreamEnd)
    assert a[-1].completion_tokens == 6 and a[-1].prompt_tokens == 4
    assert 30e6 <= ev[0].t_ns - t0 < 500e6  # its schedule starts when it got the slot, at once here
    c_ev = [x for x in c if isinstance(x, TokenEvent)]
    assert c_ev[0].t_ns - ev[-1].t_ns >= 30e6  # queued behind the whole first request


def test_failures_stalls_death_and_start_failure_are_deterministic():
    async def go(target, n=40):
        async with FakeBackend(SPEC, target=target) as b:
            return [(await _collect(b, _req(i)))[1] for i in range(n)]
    failed = [i for i, items in enumerate(asyncio.run(go("ttft=0ms+itl=0ms+fail=0.5")))
              if isinstance(items[-1], BackendRequestError)]
    again = [i for i, items in enumerate(asyncio.run(go("ttft=0ms+itl=0ms+fail=0.5")))
             if isinstance(items[-1], BackendRequestError)]
    assert failed == again and 5 < len(failed) < 35  # the same requests, by id
    stalled = asyncio.run(go("ttft=0ms+itl=1ms+stall=40ms", n=1))[0]
    gaps = [y.t_ns - x.t_ns for x, y in zip(stalled, stalled[1:-1])]
    assert max(gaps) >= 40e6 and sorted(gaps)[0] < 10e6
    dead = asyncio.run(go("ttft=0ms+itl=0ms+die_after=2", n=4))
    assert [str(x[-1].kind) if isinstance(x[-1], BackendRequestError) else "ok" for x in dead] == \
        ["ok", "ok", "engine_dead", "engine_dead"]
    with pytest.raises(BackendStartError, match="start_fail"):
        asyncio.run(go("start_fail=true", n=0))


def test_run_says_it_is_a_test_instrument(tmp_path, tiny_model):
    p = cli("run", "--backends", "fake@ttft=10ms+itl=2ms", "--model", str(tiny_model), "--num-requests", "4",
                "--input-len", "8", "--output-len", "4", "--concurrency", "2", "--warmup", "0",
                "--out", str(tmp_path), "--run-id", "f")
    assert p.returncode == 0, p.stderr
    b = json.loads((tmp_path / "f" / "run.json").read_text())["backends"]["fake@ttft=10ms+itl=2ms"]
    assert b["describe"]["framework"] == "fake (test instrument)" and b["describe"]["native_config"]["test_instrument"]
    assert any("TEST INSTRUMENT" in n for n in b["capabilities"]["notes"])
    assert b["levels"]["c2"]["ok"] == 4 and b["levels"]["c2"]["ttft_ms"]["p50"] == pytest.approx(10, abs=0.5)
    listing = cli("backends").stdout
    assert "TEST INSTRUMENT" in " ".join(listing.split())
    bad = cli("run", "--backends", "fake@ttft=soon", "--model", str(tiny_model), "--out", str(tmp_path / "bad"))
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "ttft='soon'" in bad.stderr
    assert not (tmp_path / "bad").exists()
