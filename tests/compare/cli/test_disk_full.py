"""The disk filling while `compare` writes: real faults, never a patched write. A file-size limit
(`ulimit -f`, RLIMIT_FSIZE: writes past it fail with EFBIG, which Python does not die of) needs no
privileges; a small tmpfs filled to the brim gives the real ENOSPC (root only, else skipped).
One line, no traceback; nothing half-written; what was measured before is kept."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.compare.cli.test_cli_bad_input import assert_one_line_error
from tests.conftest import ROOT, VENV_BIN, run_cli
from tests.core.test_results_io import _mount_tmpfs


def _limited(kib: int, *args: str) -> subprocess.CompletedProcess:
    """`compare ARGS` with every file it writes limited to ``kib`` KiB."""
    cmd = f"ulimit -f {kib}; exec \"$0\" \"$@\""
    return subprocess.run(["bash", "-c", cmd, str(VENV_BIN / "compare"), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def _error_lines(p) -> list[str]:
    return [x for x in p.stderr.splitlines() if x.startswith("error:") or "Traceback" in x]


def test_a_file_size_limit_hit_mid_run_stops_it_with_one_line_and_keeps_what_was_measured(tmp_path):
    p = _limited(100, "run", "--backends", "fake@ttft=1ms+itl=0ms", "--num-requests", "150", "--input-len", "4",
                 "--output-len", "32", "--concurrency", "2", "--out", str(tmp_path), "--run-id", "f")
    assert p.returncode == 1, p.stderr[-2000:]  # a run that measured but did not complete
    assert _error_lines(p) == [f"error: cannot write requests.jsonl in {tmp_path}/f: File too large (EFBIG); free "
                               f"space on that disk (or pass another --out) and run again; the results so far are "
                               f"kept"], p.stderr
    d = tmp_path / "f"
    run = json.loads((d / "run.json").read_text())
    assert run["status"] == "failed" and "EFBIG" in run["error"]
    assert [b["status"] for b in run["backends"].values()] == ["failed"]
    data = (d / "requests.jsonl").read_bytes()
    assert data.endswith(b"\n") and 10 < data.count(b"\n") < 150  # records kept, every line whole
    assert not (d / ".space-reserve").exists() and not list(d.glob(".*.json.*"))  # no temp file left
    rep = run_cli("report", str(d))
    assert rep.returncode == 0 and "Traceback" not in rep.stderr, rep.stderr[-2000:]


@pytest.mark.parametrize("kib", [8, 40])
def test_a_file_size_limit_hit_before_anything_is_measured_leaves_nothing(tmp_path, kib):
    """8 KiB: the space reserve does not fit; 40 KiB: workload.jsonl does not. Nothing measured,
    so nothing is kept: exit 2 like a bad --out, and the results root it made is taken back."""
    out = tmp_path / "new" / "root"
    p = _limited(kib, "run", "--backends", "fake", "--num-requests", "400", "--input-len", "16", "--out", str(out))
    assert_one_line_error(p, "File too large (EFBIG)", "pass a")
    assert not (tmp_path / "new").exists()


@pytest.fixture
def full_disk(tmp_path):
    d = _mount_tmpfs(tmp_path / "disk", "size=64k")
    try:  # (unmounted whatever happens here: a mount must not outlive the test)
        fd = os.open(d / "filler", os.O_WRONLY | os.O_CREAT)  # every block taken
        try:
            while True:
                os.write(fd, b"\0" * 4096)
        except OSError:
            pass
        finally:
            os.close(fd)
        yield d
    finally:
        subprocess.run(["umount", str(d)], check=False)


def test_a_full_disk_under_report_baseline_and_run(tmp_path, full_disk):
    good = tmp_path / "good"
    assert run_cli("run", "--backends", "fake", "--num-requests", "2", "--concurrency", "1", "--out", str(good),
                   "--run-id", "g", "--quiet").returncode == 0
    before = sorted(os.listdir(full_disk))
    p = run_cli("report", str(good / "g"), "--out", str(full_disk / "r.md"))
    assert_one_line_error(p, f"--out {full_disk}/r.md cannot be written: No space left on device (ENOSPC)")
    p = run_cli("baseline", "save", str(good / "g"), "--name", "b", "--dir", str(full_disk / "bl"))
    assert_one_line_error(p, f"cannot write {full_disk}/bl/b.json: No space left on device (ENOSPC)",
                          "nothing was written")
    p = run_cli("run", "--backends", "fake", "--num-requests", "2", "--out", str(full_disk / "res"))
    assert_one_line_error(p, "No space left on device (ENOSPC)", "pass a writable directory with --out")
    assert sorted(os.listdir(full_disk)) == before  # no file, no temp file, no directory left
    assert Path(good / "g" / "run.json").is_file()
