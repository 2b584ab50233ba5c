"""Every test whose outcome depends on the CPU's instruction sets says so with the `isa` marker,
which scripts/test.sh runs again with LLM_COMPARE_CPU_ISA=avx2 and =avx512: an AVX-512 host then
answers as an AVX2-only one does, so an assertion that holds on one kind of host only fails on
any host. A test file that asks this machine's instruction sets (or the machine probe that
carries them) without the marker fails here."""
from __future__ import annotations

import os
import re

import pytest

from core.errors import UserError
from core.hardware import CPU_ISA_ENV, cpu_flags, has_isa, host_cpu_flags, lower_flags
from tests.conftest import ROOT

# what reads the host's instruction sets: the lookup itself, and the machine probe built on it
_ASKS_HOST = re.compile(r"\b(cpu_flags|has_isa|isa_summary|probe_machine)\(")
_MARKED = re.compile(r"pytest\.mark\.isa\b")


def test_every_test_that_asks_the_host_is_marked():
    unmarked = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        if path.name == "test_isa_marks.py":
            continue
        text = path.read_text()
        if _ASKS_HOST.search(text) and not _MARKED.search(text):
            unmarked.append(str(path.relative_to(ROOT)))
    assert not unmarked, f"mark these @pytest.mark.isa (or pytestmark): {unmarked}"


@pytest.mark.isa
def test_the_switch_only_lowers(monkeypatch):
    host = host_cpu_flags()
    if host is None:
        pytest.skip("no x86 flags line in /proc/cpuinfo here")
    monkeypatch.setenv(CPU_ISA_ENV, "avx2")
    assert not has_isa(cpu_flags(), "AVX-512") and not has_isa(cpu_flags(), "AMX")
    assert has_isa(cpu_flags(), "AVX2") == has_isa(host, "AVX2")
    monkeypatch.setenv(CPU_ISA_ENV, "avx512")
    assert not has_isa(cpu_flags(), "AMX") and has_isa(cpu_flags(), "AVX-512") == has_isa(host, "AVX-512")
    monkeypatch.setenv(CPU_ISA_ENV, "host")
    assert cpu_flags() == host
    monkeypatch.setenv(CPU_ISA_ENV, "avx1024")
    with pytest.raises(UserError, match=r"LLM_COMPARE_CPU_ISA='avx1024' is not an instruction-set level: use one of host, avx512, avx2"):
        cpu_flags()
    sapphire = frozenset({"avx2", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16", "amx_tile", "amx_int8"})
    assert lower_flags(sapphire, "avx2") == {"avx2"}
    assert lower_flags(sapphire, "avx512") == sapphire - {"amx_tile", "amx_int8"}


@pytest.mark.isa
def test_the_cli_refuses_a_bad_switch_in_one_line():
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "compare.cli", "quant", "matrix"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120, env={**os.environ, CPU_ISA_ENV: "avx1024"})
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "LLM_COMPARE_CPU_ISA='avx1024'" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.isa
def test_run_json_says_which_instruction_sets_were_assumed(monkeypatch):
    from core.hardware import fingerprint

    if host_cpu_flags() is None:
        pytest.skip("no x86 flags line in /proc/cpuinfo here")
    monkeypatch.setenv(CPU_ISA_ENV, "avx2")
    fp = fingerprint()
    assert fp.cpu_isa_assumed == "avx2" and "no AVX-512" in (fp.cpu_isa or "")
    monkeypatch.delenv(CPU_ISA_ENV)
    assert fingerprint().cpu_isa_assumed is None
