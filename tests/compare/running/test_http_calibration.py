"""The calibration server and the client self-check (no engine): causality and bookkeeping."""
from __future__ import annotations

import asyncio

import pytest

from backends.http import native
from compare.running.calibration import CalibrationServerProcess, CalibrationTiming
from compare.running.calibration.client import measure
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


def _expected_clock(native_off: bool) -> tuple[str, str]:
    """What this machine must report: kernel stamps where the socket option works (Linux), the
    receive thread where the C helper is built and current (scripts/setup.d/50-http-native.sh),
    else the event loop reads; LLM_COMPARE_HTTP_NATIVE=0 always gives the event loop."""
    from backends.http import native, rxstamp

    if not rxstamp.kernel_stamps():
        return "stamps: user: perf_counter_ns", "reads: the event loop"
    thread = native.RxThread is not None and not native_off
    return "stamps: kernel: SO_TIMESTAMPNS", "reads: receive thread" if thread else "reads: event loop"


@pytest.mark.parametrize("native_off", [False, True], ids=["native", "native-off"])
def test_calibrate_cli_says_what_stamped_and_read_the_events(native_off):
    env = {native.ENV: "0"} if native_off else None
    p = run_cli("calibrate", "--streams", "20", "--tokens", "5", "--itl-ms", "10", timeout=300, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    out = " ".join(p.stdout.split())  # rich wraps long lines
    assert "max sustainable streams" in out
    stamps, reads = _expected_clock(native_off)
    assert stamps in out and reads in out, out[-800:]
    # the kernel path measures how long a read waited in its socket; the user clock cannot
    assert ("longest wait of a read in its socket" in out) == stamps.startswith("stamps: kernel")


def test_this_checkout_has_the_receive_thread_where_a_c_compiler_exists():
    """The setup builds the C helper wherever it can; a stale or missing build here would make
    the test above check only the fallback."""
    import shutil
    import sysconfig
    from pathlib import Path

    buildable = bool(shutil.which("cc") or shutil.which("gcc")) and (
        Path(sysconfig.get_paths()["include"]) / "Python.h").exists()
    if buildable:
        assert native.status == "on" and native.RxThread is not None, (
            f"HTTP native helper: {native.status}; run scripts/setup.d/50-http-native.sh")
    else:  # no compiler: the pure-Python path, and the status says why
        assert native.RxThread is None and native.status != "on", native.status
