"""A vllm-server run leaves nothing in the system temp directory: vLLM's file-store rendezvous
(``vllm_dist_*``) goes into the server's own TMPDIR, removed when the server stops."""
from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from tests.conftest import TINY_SPEC_ARGS, run_cli

pytestmark = pytest.mark.engine


def test_vllm_server_leaves_no_temp_files(tmp_path):
    pytest.importorskip("vllm")
    tmp = Path(tempfile.gettempdir())
    before = set(tmp.glob("vllm_dist_*")) | set(tmp.glob("llm-compare-vllm-server-tmp-*"))
    r = run_cli("run", "--backends", "vllm-server", *TINY_SPEC_ARGS, "--num-requests", "2", "--input-len", "8",
                "--output-len", "4", "--concurrency", "1", "--warmup", "1", "--out", str(tmp_path), "--run-id", "v")
    assert r.returncode == 0, r.stderr[-3000:]
    after = set(tmp.glob("vllm_dist_*")) | set(tmp.glob("llm-compare-vllm-server-tmp-*"))
    assert after - before == set()
