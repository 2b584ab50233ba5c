"""The calibration server and the client self-check (no engine): causality and bookkeeping."""
from __future__ import annotations

import asyncio

from compare.running.calibration import CalibrationServerProcess, CalibrationTiming, measure
from tests.conftest import run_cli


def test_client_stamps_are_causal_and_complete():
    with CalibrationServerProcess(CalibrationTiming(ttft_ms=30, itl_ms=10, tokens_per_event=2)) as url:
        r = asyncio.run(measure(url, streams=20, tokens=11))
    assert r["ok"] == r["requests"] == 20 and not r["errors"]
    assert r["tokens"] == 20 * 11 and r["events"] == 20 * 6  # 2 tokens per event, last event carries 1
    # a client stamp can never precede the server's send stamp (same CLOCK_MONOTONIC)
    assert r["timing_error_ms"]["min"] >= 0
    assert r["records_match_observer"]  # the runner's records hold the very stamps observed


def test_calibrate_bad_input_is_one_line_exit_2():
    p = run_cli("calibrate", "--streams", "0")
    assert p.returncode == 2 and p.stderr.startswith("error: --streams") and "Traceback" not in p.stderr


def test_calibrate_cli_says_what_stamped_and_read_the_events():
    p = run_cli("calibrate", "--streams", "20", "--tokens", "5", "--itl-ms", "10", timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    out = " ".join(p.stdout.split())  # rich wraps long lines
    assert "max sustainable streams" in out and "stamps: " in out and "reads: " in out
    from backends.http import native, rxstamp
    if rxstamp.kernel_stamps() and native.RxThread is not None:
        assert "kernel: SO_TIMESTAMPNS" in out and "reads: receive thread" in out
        assert "longest wait of a read in its socket" in out
