"""What a new user sees: ``compare run`` on real engines prints no engine log line, fits an
80-column terminal in a few dozen lines, and opens its summary with the verdict; the engines' own
output is in RESULTS/logs/; a backend that fails to start shows the end of its log. ``--quiet``
(console only, no engine) is test_console_quiet.py's, on the fake engine."""
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


def _lines(p) -> list[str]:
    return (p.stdout + p.stderr).splitlines()


def test_two_engines_print_a_short_readable_console_and_file_their_logs(tmp_path, tiny_model):
    p = run_cli("run", "--backends", "vllm,hf", "--model", str(tiny_model), *TINY_SPEC_ARGS, *SMALL,
                "--concurrency", "1,2", "--out", str(tmp_path), "--run-id", "r", env=ENV, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    lines = _lines(p)
    noisy = [ln for ln in lines if ENGINE_LINE.search(ln)]
    assert not noisy, noisy
    assert len(lines) <= 40, "\n".join(lines)
    # every line fits 80 columns; a results path is never broken (it stays copyable), so a line
    # holding it counts the path as 10 columns, what a short --out would take
    out_dir = str(tmp_path / "r")
    wide = [ln for ln in lines if len(ln) - (len(out_dir) - 10 if out_dir in ln else 0) > 80]
    assert not wide, "\n".join(wide)
    out = p.stdout
    # one line per finished level, then the answer before the table
    assert re.search(r"^  vllm c1: 4/4 ok, [0-9.]+ tok/s", out, re.M) and re.search(r"^  hf c2: 4/4 ok", out, re.M)
    verdict = out.index("Verdict (reference vllm")
    assert verdict < out.index("backend") < out.index("results: ")
    assert re.search(r"Throughput: (vllm|hf) peaks at [0-9.]+ out tok/s \(c[12]\)", out)
    assert "First token at c1:" in out and "(point estimate)" in out
    assert out.count("fewer than 2 repeats") == 1  # the caveat once, under the table
    logs = tmp_path / "r" / "logs"
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
