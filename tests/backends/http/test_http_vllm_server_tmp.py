"""A vllm-server run leaves nothing in the system temp directory: vLLM's file-store rendezvous
(``vllm_dist_*``) goes into the server's own TMPDIR, removed when the server stops."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from tests.conftest import TINY_SPEC_ARGS, run_cli

pytestmark = pytest.mark.engine


def test_vllm_server_leaves_no_temp_files(tmp_path):
    pytest.importorskip("vllm")
    # a temp directory of this run's own (other engines of the test session write to the system's);
    # short, as a real TMPDIR is: vLLM's IPC socket paths under it must stay below 107 bytes
    tmp = Path(tempfile.mkdtemp(prefix="lc-t-"))
    r = run_cli("run", "--backends", "vllm-server", *TINY_SPEC_ARGS, "--num-requests", "2", "--input-len", "8",
                "--output-len", "4", "--concurrency", "1", "--warmup", "1", "--out", str(tmp_path / "res"),
                "--run-id", "v", env={"TMPDIR": str(tmp)})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    left = sorted(p.name for p in tmp.iterdir())
    try:
        assert not [n for n in left if n.startswith(("vllm_dist_", "lc-vs-"))], left
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
