"""CPU instruction sets from /proc/cpuinfo flags (core/hardware.py): pure parsing of sample flag
lines from both kinds of x86 host, and this machine's reading checked against torch's own."""
from __future__ import annotations

import pytest

from core.hardware import ISAS, cpu_flags, host_cpu_flags, fingerprint, has_isa, isa_summary, parse_cpu_flags, parse_gpus
from core.results.models import GpuInfo, HardwareInfo

# every test here answers by the CPU's instruction sets (run again under LLM_COMPARE_CPU_ISA=avx2, avx512)
pytestmark = pytest.mark.isa

# trimmed 'flags' lines: an AMD EPYC 7763 (Zen 3: AVX2, no AVX-512) and an Intel Sapphire Rapids
EPYC_ZEN3 = ("fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat sse sse2 ht syscall nx mmxext "
             "pdpe1gb rdtscp lm constant_tsc pni pclmulqdq ssse3 fma cx16 sse4_1 sse4_2 movbe popcnt aes xsave "
             "avx f16c rdrand lahf_lm svm sse4a fsgsbase bmi1 avx2 smep bmi2 erms rdseed adx sha_ni vaes "
             "vpclmulqdq rdpid fsrm")
SAPPHIRE_RAPIDS = ("fpu vme de pse tsc msr pae sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c avx2 bmi1 bmi2 avx512f "
                   "avx512dq avx512ifma avx512cd avx512bw avx512vl avx512vbmi avx512_vbmi2 avx512_vnni "
                   "avx512_bitalg avx512_vpopcntdq avx_vnni avx512_bf16 amx_bf16 avx512_fp16 amx_tile amx_int8")


def _cpuinfo(flags: str) -> str:
    return (f"processor\t: 0\nvendor_id\t: X\nmodel name\t: some CPU\nflags\t\t: {flags}\nbugs\t\t: spectre_v1\n\n"
            f"processor\t: 1\nflags\t\t: {flags}\n")


def test_an_avx2_only_epyc_has_no_avx512():
    flags = parse_cpu_flags(_cpuinfo(EPYC_ZEN3))
    assert flags is not None and "avx2" in flags and "spectre_v1" not in flags  # the bugs line is not flags
    assert has_isa(flags, "AVX2") and not has_isa(flags, "AVX-512") and not has_isa(flags, "AMX")
    assert isa_summary(flags) == "AVX2 (no AVX-512)"


def test_sapphire_rapids_has_every_named_isa():
    flags = parse_cpu_flags(_cpuinfo(SAPPHIRE_RAPIDS))
    assert flags is not None and all(has_isa(flags, n) for n in ISAS)
    assert isa_summary(flags) == "AVX2, AVX-512, AVX512-BF16, AMX"


def test_partial_avx512_is_not_avx512():
    # AVX-512 F without BW/VL/DQ (Knights Landing): not what vLLM's AVX-512 build needs
    flags = parse_cpu_flags(_cpuinfo("avx2 avx512f avx512cd"))
    assert flags is not None and not has_isa(flags, "AVX-512")


def test_no_flags_line_is_unknown_not_empty():
    arm = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd evtstrm aes sha2 crc32 atomics\n"
    assert parse_cpu_flags(arm) is None
    assert parse_cpu_flags("") is None
    assert isa_summary(frozenset()) == "none of AVX2, AVX-512, AVX512-BF16, AMX"


def test_this_machine_agrees_with_torch():
    """Our reading of /proc/cpuinfo says what torch's cpuinfo says (vLLM chooses its kernel
    library by torch's answers)."""
    torch = pytest.importorskip("torch")
    flags = host_cpu_flags()
    if flags is None:
        pytest.skip("no x86 flags line in /proc/cpuinfo here")
    assert has_isa(flags, "AVX-512") == torch.cpu._is_avx512_supported()
    assert has_isa(flags, "AVX512-BF16") == torch.cpu._is_avx512_bf16_supported()
    assert has_isa(flags, "AMX") == torch.cpu._is_amx_tile_supported()


def test_gpu_inventory_from_nvidia_smi_is_typed():
    # the H200 host's nvidia-smi line, as archived runs hold it; a short line (no compute_cap) is skipped
    gpus = parse_gpus("NVIDIA H200, 580.159.04, 143771 MiB, 9.0\nNVIDIA H200, 580.159.04, 143771 MiB, 9.0\n"
                      "Tesla T4, 470.82\n")
    assert gpus == [GpuInfo(name="NVIDIA H200", driver="580.159.04", memory="143771 MiB", compute_cap="9.0")] * 2
    fp = fingerprint()
    assert isinstance(fp, HardwareInfo) and fp.cpu_count and all(isinstance(g, GpuInfo) for g in fp.gpus)
    # every field set: run.json's hardware section keeps its keys (None included)
    assert fp.model_fields_set == set(HardwareInfo.model_fields)
