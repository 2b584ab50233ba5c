"""The calibration server and the client self-check (no engine): causality and bookkeeping."""
from __future__ import annotations

import asyncio

from compare.calibration import CalibrationServerProcess, CalibrationTiming, measure
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
