"""The console's layout without an SLO, and ``compare run --quiet`` (the verdict and the results path
only): what the console does, so on the fake engine (backends/fake/, a test instrument); what real
engines print (nothing of their own) is test_console_e2e.py's."""
from __future__ import annotations

import re

from tests.compare.report.test_console_e2e import ENV, SMALL
from tests.conftest import run_cli


def test_quiet_prints_the_verdict_and_the_results_path_only(tmp_path, tiny_model):
    p = run_cli("run", "--backends", "fake", "--model", str(tiny_model), *SMALL,
                "--concurrency", "1", "--out", str(tmp_path), "--run-id", "q", "--quiet", env=ENV, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    out = p.stdout.strip().splitlines()
    assert out[0].startswith("Verdict (one backend, run complete)")
    assert out[-1] == f"results: {tmp_path / 'q'}"
    assert len(out) <= 6 and not any("TTFT p50" in ln and "backend" in ln for ln in out), out
    assert "fake c1:" not in p.stdout  # no progress lines
    assert (tmp_path / "q" / "logs" / "fake.log").exists()


def test_two_backends_without_an_slo_fit_an_80_column_terminal(tmp_path, tiny_model):
    p = run_cli("run", "--backends", "fake", "--native", "fake.ttft=5ms", "--native", "fake.itl=2ms",
                "--model", str(tiny_model), "--vary", "max_model_len=256,512", *SMALL, "--concurrency", "1,2",
                "--out", str(tmp_path), "--run-id", "r", env=ENV, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    lines = (p.stdout + p.stderr).splitlines()
    assert len(lines) <= 40, "\n".join(lines)
    # a results path is never broken (it stays copyable): a line holding it counts it as 10 columns
    out_dir = str(tmp_path / "r")
    wide = [ln for ln in lines if len(ln) - (len(out_dir) - 10 if out_dir in ln else 0) > 80]
    assert not wide, "\n".join(wide)
    out = p.stdout
    # one line per finished level, then the answer before the table
    assert re.search(r"^  fake\[max_model_len=256\] c1: 4/4 ok, [0-9.]+ tok/s", out, re.M)
    assert re.search(r"^  fake\[max_model_len=512\] c2: 4/4 ok", out, re.M)
    verdict = out.index("Verdict (reference A")
    assert verdict < out.index("backend") < out.index("results: ")
    # without an SLO the answer is throughput and latency, each saying how sure it is
    assert re.search(r"Throughput: [AB] peaks at [0-9.]+ out tok/s \(c[12]\)", out)
    assert "First token at c1:" in out and "(point estimate)" in out
    assert out.count("fewer than 2 repeats") == 1  # the caveat once, under the table
