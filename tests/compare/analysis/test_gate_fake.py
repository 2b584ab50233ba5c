"""The regression gate end to end on the fake engine (backends/fake/, a test instrument): a baseline
saved from one run, `compare check` passes the same config run again (exit 0) and flags a genuinely
slower one (exit 1) naming the spec change next to the slower metric. The fake's timings are its
schedule, so the repeats agree almost exactly: the gate must handle near-zero repeat noise. The shared
real runs (tests/conftest.py) hold one repeat each: a baseline needs two or more."""
from __future__ import annotations

import pytest

from tests.conftest import cli

# 20 ms to the first token, 5 ms per token; 48 tokens hold a sequence slot for ~255 ms
FAKE = ("--backends", "fake", "--native", "fake.ttft=20ms", "--native", "fake.itl=5ms")
WORKLOAD = ("--num-requests", "6", "--input-len", "24", "--output-len", "48", "--concurrency", "2",
            "--warmup", "1", "--repeats", "2")


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_model):
    out = tmp_path_factory.mktemp("gate")
    # the rerun also writes its report as `compare run --format html` does
    for run_id, extra in (("base", ("--format", "json")), ("again", ("--format", "html")),
                          ("slow", ("--max-num-seqs", "1", "--format", "json"))):
        p = cli("run", *FAKE, "--model", str(tiny_model), *WORKLOAD, *extra, "--out", str(out),
                    "--run-id", run_id)
        assert p.returncode == 0, p.stderr[-3000:]
    return out


def test_baseline_passes_the_same_config_and_flags_a_slower_one(runs, tmp_path):
    r = cli("baseline", "save", str(runs / "base"), "--name", "fake", "--dir", str(tmp_path))
    assert r.returncode == 0, r.stderr
    r = cli("check", "--baseline", "fake", "--dir", str(tmp_path), str(runs / "again"))
    assert r.returncode == 0 and "RESULT: PASS" in r.stdout, r.stdout + r.stderr
    # one slot under concurrency 2: every second request waits a whole request (TTFT 20 -> ~275 ms)
    r = cli("check", "--baseline", "fake", "--dir", str(tmp_path), str(runs / "slow"))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "REGRESSION fake c2 TTFT" in r.stdout
    assert "backends.fake.spec.max_num_seqs: None -> 1" in r.stdout


def test_run_format_html_writes_the_report_with_its_plots(runs):
    html = (runs / "again" / "report.html").read_text()
    assert "<img" in html and "Verdict" in html
