"""End to end: a real run of the real engines (the session's shared run), its JSON output and verdict,
then `compare report --html` rendered in headless Chromium, with a pixel check that the plots are
there and not blank. Repeats (interleaving, per-repeat results, intervals) are the runner's logic:
test_repeats_fake.py."""
from __future__ import annotations

import base64
import io
import json
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

from tests.conftest import ROOT, run_cli

pytestmark = pytest.mark.engine

# matplotlib's first two default colours: the first and second backend in every plot
C0, C1 = (31, 119, 180), (255, 127, 14)
# LLM_COMPARE_SAVE_SCREENSHOT=1: the top of the rendered page (the answer and its plot) is saved
# as the README's picture of the report
SCREENSHOT = ROOT / "docs" / "img" / "report.png"


@pytest.fixture(scope="module")
def results(real_run):
    """The session's shared real run (tests/conftest.py): vllm,hf, levels c2 and r20, --format json."""
    return real_run.dir, real_run.proc


def test_json_output_carries_the_run_and_its_verdict(results):
    d, proc = results
    out = json.loads(proc.stdout)  # stdout is pure JSON: no engine wrote to it
    assert out == {**json.loads((d / "run.json").read_text()), "verdict": out["verdict"]}
    for name in ("vllm", "hf"):
        b = out["backends"][name]
        assert b["status"] == "complete" and "repeats" not in b
        assert b["levels"]["c2"]["ok"] == 6 and b["levels"]["r20"]["ok"] == 6
    order = []
    for line in (d / "requests.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if not order or order[-1] != rec["backend"]:
            order.append(rec["backend"])
    assert order == ["vllm", "hf"]  # each backend's levels in one block
    v = out["verdict"]
    assert v["reference"] == "vllm" and v["comparisons"]
    assert all(c["ci"] is None for c in v["comparisons"])  # one repeat: point estimates
    assert v["cost_per_million_output_tokens"]["vllm"]["c2"] > 0


def test_markdown_report(results):
    d, _ = results
    r = run_cli("report", str(d))
    assert r.returncode == 0, r.stderr
    md = r.stdout
    assert "## Verdict per metric" in md and "| c2 | TTFT p50 |" in md and "## Caveats" in md
    # the answer first: one headline per SLO term (ttft_p95, tpot_p95), each saying how sure it is
    answer = md.split("## Answer")[1].split("\n## ")[0]
    heads = [ln for ln in answer.splitlines() if ln.startswith("- **")]
    assert len(heads) == 2 and heads[0].startswith("- **TTFT p95 <= 30.00 s:") and "TPOT p95" in heads[1]
    # each says how sure it is, or (on a machine too loaded for hf to meet an SLO) how far off it stays
    assert all(re.search(r"significant, p=|point estimate|hf never meets it \(closest [0-9.]+ m?s at ", h)
               for h in heads), heads
    assert md.index("## Answer") < md.index("## Caveats") < md.index("## Measurements")


def _colour_pixels(img: np.ndarray, rgb: tuple[int, int, int], tol: int = 30) -> int:
    return int((np.abs(img[:, :, :3].astype(int) - rgb).max(axis=2) <= tol).sum())


def test_html_report_renders_with_plots_in_chromium(results, tmp_path):
    from PIL import Image

    d, _ = results
    out = tmp_path / "report.html"
    r = run_cli("report", str(d), "--html", "--out", str(out))
    assert r.returncode == 0, r.stderr
    html = out.read_text()
    assert not re.search(r'(src|href)="(https?:)?//', html)  # self-contained
    pngs = re.findall(r'src="data:image/png;base64,([^"]+)"', html)
    assert len(pngs) >= 4  # latency/throughput, TTFT CDF, ITL CDF, bars with CIs
    for b64 in pngs:  # each embedded plot has real content, not an empty frame
        img = np.asarray(Image.open(io.BytesIO(base64.b64decode(b64))).convert("RGB"))
        assert (img.min(axis=2) < 200).mean() > 0.01
        assert _colour_pixels(img, C0) > 50
    chromium = shutil.which("chromium")
    assert chromium, "chromium missing: scripts/setup.d/30-chromium.sh installs it"
    shot = tmp_path / "shot.png"
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync", "--hide-scrollbars",
                    f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1400,7000",
                    f"--screenshot={shot}", out.as_uri()], capture_output=True, timeout=180, check=False)
    assert shot.exists(), "chromium did not write a screenshot"
    page = np.asarray(Image.open(shot).convert("RGB"))
    # the plots drew both backends' colours on the page Chromium rendered
    assert _colour_pixels(page, C0) > 2000 and _colour_pixels(page, C1) > 2000
    rows = np.nonzero((np.abs(page.astype(int) - C0).max(axis=2) <= 30).any(axis=1))[0]
    assert rows.max() - rows.min() > 1000  # plot colour spread down the page: several plots, not one
    # the answer's plot (latency vs throughput, SLO line in red) comes right after the headlines:
    # both backends' colours within the first 1,400 px of the page
    top = page[:1400]
    assert _colour_pixels(top, C0) > 300 and _colour_pixels(top, C1) > 300
    if os.environ.get("LLM_COMPARE_SAVE_SCREENSHOT"):
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(page[:1250, :1340]).save(SCREENSHOT, optimize=True)
