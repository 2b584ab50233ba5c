"""The one build recipe of the HTTP client's C helpers (backends/http/native_build.py): a real
compile into a fresh directory, the module it makes (sources sha, the receive thread), and the
optional-by-design exits (no compiler: a one-line message, exit 0, nothing written)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig

import pytest

from backends.http import native_build
from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(shutil.which(os.environ.get("CC") or "gcc") is None
                                or not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")),
                                reason="no C compiler or Python headers here")


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "backends.http.native_build", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def test_build_into_a_fresh_dir_then_up_to_date(tmp_path):
    r = _cli("--dest", str(tmp_path))
    assert r.returncode == 0 and "built" in r.stderr, r.stderr
    (so,) = [p for p in tmp_path.iterdir() if p.name.startswith("_llm_compare_http")]
    assert not [p for p in tmp_path.iterdir() if p != so]  # no temporary file left behind
    probe = subprocess.run(
        [sys.executable, "-c", "import _llm_compare_http as m; print(m.SOURCE_SHA, hasattr(m, 'RxThread'), "
         "m.__file__)"], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(tmp_path)}, capture_output=True, text=True)
    sha, has_thread, path = probe.stdout.split()
    assert sha == native_build.source_sha() and has_thread == "True" and path == str(so)
    again = _cli("--dest", str(tmp_path))
    assert again.returncode == 0 and "up to date" in again.stderr, again.stderr


def test_no_compiler_is_one_line_exit_0_and_writes_nothing(tmp_path):
    r = _cli("--dest", str(tmp_path / "d"), "--cc", "/nonexistent/cc", "--force")
    assert r.returncode == 0 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "no C compiler (/nonexistent/cc)" in r.stderr and "pure-Python path" in r.stderr
    assert not (tmp_path / "d").exists()


def test_a_failing_compile_says_so_and_leaves_no_partial_file(tmp_path):
    cc = tmp_path / "cc"
    cc.write_text("#!/bin/sh\necho 'fake: error: nope' >&2\nexit 1\n")
    cc.chmod(0o755)
    r = _cli("--dest", str(tmp_path / "d"), "--cc", str(cc), "--force")
    assert r.returncode == 0 and "build failed (fake: error: nope)" in r.stderr, r.stderr
    assert list((tmp_path / "d").iterdir()) == []
