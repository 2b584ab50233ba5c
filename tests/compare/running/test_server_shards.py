"""The calibration server in several processes on one port (compare/running/calibration/shards.py):
connections spread over the processes, /stats counts them all, and nothing outlives the server."""
from __future__ import annotations

import time

import psutil

from compare.running import aio
from compare.running.calibration import CalibrationServerProcess, CalibrationTiming
from compare.running.calibration.client import server_stats
from tests.backends.http.test_http_chain import _level


def test_sharded_server_spreads_connections_counts_all_and_stops_whole():
    srv = CalibrationServerProcess(CalibrationTiming(2, 2, 1), procs=3)
    with srv as url:
        shards = [srv.proc.pid] + [c.pid for c in psutil.Process(srv.proc.pid).children()]
        assert len(shards) == 3
        before = aio.run(server_stats(url))
        records, _, _, _ = aio.run(_level(url, 24, 2, 7))
        time.sleep(0.1)  # (shards publish their counters every 10 ms)
        after = aio.run(server_stats(url))
    assert all(r.ok and len(r.token_ids) == 7 for r in records) and len(records) == 48
    assert after["shards"] == 3 and after["events"] - before["events"] == 48 * 7
    per = [a - b for a, b in zip(after["events_per_shard"], before["events_per_shard"])]
    assert sum(x > 0 for x in per) >= 2, per  # the kernel spread 24 connections over more than one process
    deadline = time.time() + 10
    while any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in shards):
        assert time.time() < deadline, "a shard outlived the server"
        time.sleep(0.1)
