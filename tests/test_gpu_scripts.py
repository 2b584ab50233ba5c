"""The GPU call scripts (benchmarks/gpu/) run only on a leased GPU machine, so what can be checked
here is checked here: every script parses, and llama.cpp quality is read from llama-perplexity's
summary lines as b11434 prints them (tools/perplexity/perplexity.cpp's LOG formats)."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

KLD_OUTPUT = """\
Final estimate: PPL = 12.3456 +/- 0.12345
====== Perplexity statistics ======
Mean PPL(Q)                   :  12.500000 ±   0.120000
Mean PPL(base)                :  12.345600 ±   0.110000
Cor(ln(PPL(Q)), ln(PPL(base))):  99.50%
Mean ln(PPL(Q)/PPL(base))     :   0.012345 ±   0.000800
Mean PPL(Q)/PPL(base)         :   1.012421 ±   0.000810
Mean PPL(Q)-PPL(base)         :   0.154400 ±   0.010000

====== KL divergence statistics ======
Mean    KLD:   0.012345 ±   0.000200
Maximum KLD:   1.234500
99.9%   KLD:   0.500000
99.0%   KLD:   0.100000
Median  KLD:   0.004000

====== Token probability statistics ======
Mean    Δp: -0.123 ± 0.010 %
Same top p: 95.123 ± 0.234 %
"""


@pytest.mark.parametrize("script", sorted(p.name for p in (ROOT / "benchmarks" / "gpu").glob("*.sh")))
def test_gpu_call_script_parses(script):
    r = subprocess.run(["bash", "-n", str(ROOT / "benchmarks" / "gpu" / script)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_llama_perplexity_summary_is_read():
    from benchmarks.gpu.llamacpp_quality import parse_kld, parse_ppl

    assert parse_ppl(KLD_OUTPUT) == 12.3456
    assert parse_kld(KLD_OUTPUT) == {"ppl": 12.5, "ppl_base": 12.3456, "ppl_ratio": 1.012421, "kl_mean": 0.012345,
                                     "kl_p99": 0.1, "same_top_pct": 95.123}
    assert parse_ppl("no estimate") is None and parse_kld("") == {}
