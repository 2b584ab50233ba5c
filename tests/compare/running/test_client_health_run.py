"""Client health through the runner, against the exact-timing loopback server (no engine): a
client whose own work blocks its event loop at every finished request is flagged, with why; one
block near the level's start is recorded and changes nothing in the judgement."""
from __future__ import annotations

import asyncio
import time

from adapters.spec import ServingSpec
from compare.analysis.client_health import FELL_BEHIND_SHARE
from compare.running.calibration import CalibrationServerProcess, CalibrationTiming
from compare.running.runner import Progress, RunConfig, run
from compare.workload.build import LengthDist, WorkloadSpec
from compare.workload.schedule import LoadLevel
from core.records import GenerationRequest
from core.results import iter_records, load_results

N, TOKENS, C = 240, 12, 8
TTFT_MS, ITL_MS, SPIKE_S = 10, 5, 0.04


class _Blocking(Progress):
    """Blocks the client's event loop (time.sleep) in the runner's per-record callback: every
    record (``every``) or only the first one."""

    def __init__(self, block_s: float, every: bool) -> None:
        self.block_s, self.every, self.seen = block_s, every, 0

    def request_done(self, rec) -> None:
        self.seen += 1
        if self.every or self.seen == 1:
            time.sleep(self.block_s)


def _run(tmp_path, url: str, progress: Progress, run_id: str, n: int = N):
    reqs = [GenerationRequest(f"r{i}", TOKENS, prompt_text="hi") for i in range(n)]
    cfg = RunConfig(backends=[f"openai@{url}"], spec=ServingSpec(model="calibration"),
                    levels=[LoadLevel("concurrency", C)],
                    workload=WorkloadSpec(num_requests=n, input=LengthDist(dist="fixed", value=1),
                                          output=LengthDist(dist="fixed", value=TOKENS), prompt_format="text"),
                    requests=reqs, warmup=1, out_root=tmp_path, run_id=run_id)
    asyncio.run(run(cfg, progress))
    r, _ = load_results(tmp_path / run_id)
    (b,) = r.backends.values()
    return b.levels[f"c{C}"], list(iter_records(tmp_path / run_id))


def test_client_health_is_judged_over_the_level(tmp_path):
    with CalibrationServerProcess(CalibrationTiming(ttft_ms=TTFT_MS, itl_ms=ITL_MS)) as url:
        # (half the requests: a loop stalled at every one is as stalled over a shorter level)
        behind, _ = _run(tmp_path, url, _Blocking(0.01, every=True), "behind", N // 2)
        spike, _ = _run(tmp_path, url, _Blocking(SPIKE_S, every=False), "spike")
    # a 10 ms block per finished request, ~one finishing every 8 ms: the loop is stalled most of the level
    h = behind.client_health
    assert h is not None and behind.client_lagged and h.fell_behind
    assert h.lagged_share > 0.3 and "loop stalled" in h.why, h
    # every observation is accounted for: first tokens of the ok requests, every later event
    assert h.affected["ttft"].n == behind.ok == N // 2 and h.affected["itl"].n == N // 2 * (TOKENS - 1)
    # one 40 ms block near the start of a ~2 s level: recorded (the longest lag is at least it),
    # and it decides nothing: were the level flagged, what the other wake-ups show (this
    # machine's own noise) would flag it alone
    s = spike.client_health
    # (the monitor sleeps 10 ms at a time: a block that starts mid-sleep shows as up to 10 ms less)
    assert s is not None and s.lag_max_ms >= SPIKE_S * 1e3 - 10 and s.samples > 100
    assert spike.loop_lag_ms is not None and spike.loop_lag_ms.max == s.lag_max_ms
    assert abs(s.window_s - spike.wall_s) < 0.01 and spike.client_lagged == s.fell_behind
    assert not s.fell_behind or _flagged_without_the_spike(s), s


def _flagged_without_the_spike(s) -> bool:
    """The judgement's terms less what the one block can account for: its share of the level's
    time, and the token events C streams receive during it."""
    block_ms = SPIKE_S * 1e3
    share = s.lagged_share - block_ms / 1e3 / s.window_s
    itl = s.affected["itl"]
    itl_share = (itl.in_stalls - C * block_ms / ITL_MS) / itl.n
    return s.lag_p99_ms > 50 or share >= FELL_BEHIND_SHARE or itl_share >= FELL_BEHIND_SHARE
