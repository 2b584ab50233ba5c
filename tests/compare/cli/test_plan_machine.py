"""`compare plan` for a machine other than this one: a GPU box planned from a CPU machine (an
AVX2-only one included, as LLM_COMPARE_CPU_ISA=avx2 makes this host answer), or another CPU by
its flags. Nothing starts; the plan names the machine it was made for."""
from __future__ import annotations

import json

import pytest

from adapters.gpus import compute_capability_of
from tests.conftest import cli

pytestmark = pytest.mark.isa  # answers as an AVX2-only host whatever this one is
AVX2 = {"LLM_COMPARE_CPU_ISA": "avx2"}
MIGRATION = ("--backends", "vllm,tgi,trtllm", "--quantization", "w4a16-awq", "--model", "Qwen/Qwen2.5-7B-Instruct")


def _one_line(r, *needles):
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    for n in needles:
        assert n in r.stderr, r.stderr


def test_an_avx2_laptop_plans_the_gpu_box_migration():
    # on this (AVX2) CPU vLLM has no W4A16 kernel: planning for this machine refuses...
    _one_line(cli("plan", *MIGRATION, env=AVX2), "w4a16-awq on cpu", "needs AVX-512")
    # ...planning for the H200 box does not
    r = cli("plan", *MIGRATION, "--device", "cuda", "--gpu", "H200", "--format", "json", env=AVX2)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert out["machine"] == {"device": "cuda", "gpu": "H200", "compute_capability": "9.0"}
    assert set(out["backends"]) == {"vllm", "tgi", "trtllm"}
    assert "--quantize" in out["backends"]["tgi"]["launcher_argv"]
    assert "awq" in json.dumps(out["backends"]["trtllm"]).lower()


def test_the_gpu_decides_what_is_refused():
    # FP8 needs Ada/Hopper tensor cores: refused for a T4 (sm_75), planned for an H100 (sm_90)
    fp8 = ("--backends", "trtllm", "--quantization", "w8a8-fp8", "--model", "Qwen/Qwen2.5-7B-Instruct", "--device", "cuda")
    _one_line(cli("plan", *fp8, "--gpu", "T4", env=AVX2), "sm_75")
    assert cli("plan", *fp8, "--gpu", "H100", env=AVX2).returncode == 0
    assert cli("plan", *fp8, "--compute-capability", "8.9", env=AVX2).returncode == 0


@pytest.mark.parametrize("args, needle", [
    (("--gpu", "Voodoo5"), "--gpu 'Voodoo5': not a GPU this tool knows"),
    (("--device", "cuda", "--compute-capability", "nine"), "--compute-capability 'nine': expected MAJOR.MINOR"),
    (("--device", "cpu", "--gpu", "H200"), "add --device cuda"),
])
def test_a_machine_that_cannot_be_planned_for_is_one_line(args, needle):
    _one_line(cli("plan", "--backends", "vllm", *args), needle)


def test_another_cpu_by_its_flags():
    # this host told it is AVX2-only, planning for an AVX-512 CPU by its flags line: W4A16 is planned
    flags = "sse4_2 avx avx2 fma avx512f avx512bw avx512vl avx512dq"
    r = cli("plan", "--backends", "vllm", "--quantization", "w4a16", "--model", "/nonexistent/m",
                "--cpu-flags", flags, env=AVX2)
    assert r.returncode == 0, r.stderr[-2000:]


def test_gpu_names_match_as_nvidia_smi_spells_them():
    assert compute_capability_of("NVIDIA H200") == "9.0" and compute_capability_of("NVIDIA GH200 480GB") == "9.0"
    assert compute_capability_of("NVIDIA L40S") == "8.9" and compute_capability_of("Tesla T4") == "7.5"
    assert compute_capability_of("Voodoo5") is None
