"""compare/report on synthetic results (real records, real metrics code); the engine-backed,
Chromium-rendered check is tests/compare/report/test_report_e2e.py."""
from __future__ import annotations

import base64
import io
import json
import re

import numpy as np
import pytest

from compare.report import load_report_data, render_html, render_markdown
from compare.report.data import server_ttft_ms
from tests.conftest import cli
from tests.synth import make_run, records


@pytest.fixture
def results_dir(tmp_path):
    cells = {"vllm": [records("vllm", "c1", k, seed=k) for k in range(2)],
             "hf": [records("hf", "c1", k, ttft_ms=30, seed=k + 9) for k in range(2)]}
    run, recs = make_run(cells)
    run["backends"]["vllm"]["levels"]["c1"]["server_metrics"] = {
        "vllm:time_to_first_token_seconds": {"sum": 0.16, "count": 16}}
    run["gpu_hour_price"] = 2.0
    d = tmp_path / "res"
    d.mkdir()
    (d / "run.json").write_text(json.dumps(run))
    (d / "requests.jsonl").write_text("".join(json.dumps(r.to_json()) + "\n" for r in recs))
    return d


def test_markdown_has_verdict_caveats_costs_and_server_ttft(results_dir):
    md = render_markdown(load_report_data(results_dir))
    assert "## Verdict per metric" in md and "| c1 | TTFT p50 | vllm:" in md
    assert "## Caveats" in md and "$/M out tok" in md and "$2/device-hour" in md  # price from run.json
    assert "| vllm | c1 | " in md and "Server-side vs client-side TTFT" in md
    assert re.search(r"\| vllm \| c1 \| [0-9.]+ \| 10\.0 \|", md)  # 0.16 s / 16 = 10 ms server-side


def test_html_is_self_contained_with_every_plot(results_dir):
    from PIL import Image

    html = render_html(load_report_data(results_dir))
    ids = re.findall(r'id="plot-([a-z_]+)"', html)
    assert ids == ["latency_vs_throughput", "ttft_cdf", "itl_cdf", "bars_ci", "server_vs_client_ttft"]
    assert "<script" not in html and not re.search(r'(src|href)="(https?:)?//', html)
    for b64 in re.findall(r'src="data:image/png;base64,([^"]+)"', html):
        img = np.asarray(Image.open(io.BytesIO(base64.b64decode(b64))).convert("RGB"))
        assert img.shape[0] > 200 and (img.min(axis=2) < 200).mean() > 0.01


def test_server_ttft_layouts():
    assert server_ttft_ms({"vllm:time_to_first_token_seconds": {"sum": 0.5, "count": 10}}) == pytest.approx(50.0)
    assert server_ttft_ms({"after": {"ttft_ms": {"mean": 3.0}}}) == 3.0
    assert server_ttft_ms({"tgi_request_queue_duration": 1.0}) is None
    assert server_ttft_ms(None) is None


def test_report_bad_input_is_one_line_exit_2(tmp_path, results_dir):
    r = cli("report", str(tmp_path / "missing"))
    assert r.returncode == 2 and "Traceback" not in r.stderr and "results directory" in r.stderr
    run = json.loads((results_dir / "run.json").read_text())
    run["schema_version"] = 99
    (results_dir / "run.json").write_text(json.dumps(run))
    r = cli("report", str(results_dir), "--html")
    assert r.returncode == 2 and "schema_version 99" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_report_re_renders_schema_1_results(tmp_path):
    """A results directory written by schema 1 (real, trimmed: tests/fixtures/results-v1) still renders."""
    from tests.conftest import FIXTURES

    out = tmp_path / "v1.md"
    r = cli("report", str(FIXTURES / "results-v1"), "--out", str(out))
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    assert "# llm-compare report: topo-h200" in text
    # long topology names become short labels, mapped once by a legend
    assert "labels: A = tp@2*vllm-server; B = replicas@2*vllm-server:lb=lor" in text
    assert re.search(r"\| A \| r30 \| 512/512 \| 3428\.0 \|", text)
    assert "r30: B vs A" in text and "| B |" in text
    assert text.count("tp@2*vllm-server") <= 3  # legend, caveat, nothing else spelled out


def test_answer_first_then_its_plot_then_details_and_caveats_once(tmp_path):
    """The page opens with one headline per SLO term, then the latency/throughput plot with the SLO
    line, then caveats (each once), then the tables."""
    from tests.conftest import FIXTURES

    d = load_report_data(FIXTURES / "results-v1")
    html = render_html(d)
    pos = [html.index(x) for x in ("<h2>Answer</h2>", "TTFT p95 &lt;= 2.00 s: A and B both hold it up to r30",
                                   'id="plot-latency_vs_throughput"', "<h2>Caveats", "<h2>Measurements",
                                   "<h2>Verdict per metric")]
    assert pos == sorted(pos)
    assert html.count("fewer than 2 repeats") == 1  # the caveat once, not in every table row
    assert "repeats: too few" not in html
    md = render_markdown(d)
    answer = md.split("## Answer")[1].split("##")[0]
    assert answer.count("- **") == 2  # ttft_p95 and tpot_p95: one headline per SLO term
    assert md.index("## Answer") < md.index("## Latency vs throughput") < md.index("## Measurements")


def test_console_table_fits_80_columns_with_a_legend():
    from rich.console import Console

    from compare.report.console import comparison_table
    from compare.report.labels import legend, short_labels
    from core.results import load_results
    from tests.conftest import FIXTURES

    run, _ = load_results(FIXTURES / "results-v1")
    labels = short_labels(run.backends)
    assert legend(labels) == ["A = tp@2*vllm-server", "B = replicas@2*vllm-server:lb=lor"]
    for width, wide_cols in ((80, False), (160, True)):
        con = Console(file=io.StringIO(), width=width)
        con.print(comparison_table(run, width, labels))
        text = con.file.getvalue()
        lines = text.splitlines()
        assert max(len(ln) for ln in lines) <= width and len(lines) <= 7, text
        assert any(ln.lstrip().startswith("A ") and "3428.0" in ln for ln in lines)
        assert ("ITL" in text) == wide_cols  # wider terminals get more columns
