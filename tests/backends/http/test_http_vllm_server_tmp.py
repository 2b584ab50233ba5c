"""A vllm-server run leaves nothing in the system temp directory: vLLM's file-store rendezvous
(``vllm_dist_*``) goes into the server's own TMPDIR, removed when the server stops. Read from the
session's prefix_run (tests/conftest.py: a vllm,vllm-server run in a temp directory of its own; the
in-process engine removes its own rendezvous file when it stops)."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.engine


def test_vllm_server_leaves_no_temp_files(prefix_run):
    assert prefix_run.run["backends"]["vllm-server"]["status"] == "complete"
    assert not [n for n in prefix_run.temp_left if n.startswith(("vllm_dist_", "lc-vs-"))], prefix_run.temp_left
