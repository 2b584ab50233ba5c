"""What a new user sees of real engines: ``compare run`` prints no engine log line, the engines' own
output is in RESULTS/logs/; a backend that fails to start shows the end of its log. The two-engine
run is the session's shared one (tests/conftest.py real_run: vllm,hf with --format json, so its
console is on stderr and its stdout pure JSON, test_report_e2e.py). The console's layout (80
columns, the verdict first) and ``--quiet`` are test_console_quiet.py's, on the fake engine."""
from __future__ import annotations

import re

import pytest

from tests.conftest import TINY_SPEC_ARGS, run_cli

pytestmark = pytest.mark.engine

SMALL = ("--num-requests", "4", "--input-len", "16", "--output-len", "8", "--warmup", "1")
# what engines print: vLLM's log records, torch/transformers progress bars and warnings
ENGINE_LINE = re.compile(r"\b(INFO|WARNING|ERROR|DEBUG)\b \d\d-\d\d |EngineCore|Loading weights|it/s\]|"
                         r"Triton|UserWarning|torch\.|Traceback")
ENV = {"COLUMNS": "80", "LINES": "40"}


def test_two_engines_print_no_engine_line_and_file_their_logs(real_run):
    err = real_run.proc.stderr  # the console: one line per engine start and per finished level
    noisy = [ln for ln in err.splitlines() if ENGINE_LINE.search(ln)]
    assert not noisy, noisy
    assert len(err.splitlines()) <= 12, err
    assert re.search(r"^  vllm c2: 6/6 ok, [0-9.]+ tok/s", err, re.M) and re.search(r"^  hf r20: 6/6 ok", err, re.M)
    logs = real_run.dir / "logs"
    vllm_log = (logs / "vllm.log").read_text()
    assert "EngineCore" in vllm_log and re.search(r"INFO \d\d-\d\d", vllm_log)  # vLLM's own lines, filed
    assert "[shutdown]" in vllm_log  # teardown chatter too
    assert (logs / "hf.log").exists()


def test_a_backend_that_fails_to_start_shows_its_log_tail(tmp_path, tiny_model):
    """A KV cache too small for one block: vLLM's engine core refuses to start; the reason is
    in the engine's log, and the console shows that log's last lines (without traceback frames)."""
    args = [a if a != str(64 << 20) else "4096" for a in TINY_SPEC_ARGS]  # --kv-cache-memory-bytes 4096
    p = run_cli("run", "--backends", "vllm", "--model", str(tiny_model), *args, *SMALL, "--concurrency", "1",
                "--out", str(tmp_path), "--run-id", "f", env=ENV, timeout=600)
    assert p.returncode == 1, p.stdout + p.stderr
    log = tmp_path / "f" / "logs" / "vllm.log"
    out = p.stdout
    assert "✗ vllm failed: vLLM engine failed to start" in out
    assert f"last lines of {log}" in out.replace("\n", "")
    assert re.search(r"\| ValueError: No available memory for the cache blocks", out)
    assert '  File "' not in out and "Traceback" not in out + p.stderr
    assert "No available memory for the cache blocks" in log.read_text()
    assert "nothing was measured" in out and f"results: {tmp_path / 'f'}" in out
