"""Bad input: one line naming the problem and the fix, exit code 2, no traceback, nothing written."""
import subprocess
import sys

import pytest

from core.hardware import cpu_flags, has_isa
from tests.conftest import ROOT, run_cli

# every test here answers by the CPU's instruction sets (run again under LLM_COMPARE_CPU_ISA=avx2, avx512)
pytestmark = pytest.mark.isa

# an unquantized model asked for AWQ: make a checkpoint, unless this CPU lacks vLLM's 4-bit kernel
_WNA16_FIX = "compare quantize" if cpu_flags() is None or has_isa(cpu_flags() or (), "AVX-512") else "needs AVX-512"


def assert_one_line_error(p, *needles):
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    lines = [x for x in p.stderr.strip().splitlines() if x.strip() and not x.startswith("using the embedded")]
    assert len(lines) == 1, p.stderr
    assert "Traceback" not in p.stderr
    for n in needles:
        assert n in lines[0], lines[0]


@pytest.mark.parametrize("args, needles", [
    (["run", "--backends", "vllm,nosuch"], ["unknown backend 'nosuch'", "compare backends"]),
    (["run", "--backends", "", "--model", "/x"], ["--backends is empty"]),
    (["run", "--model", "/does/not/exist", "--backends", "hf"], ["/does/not/exist", "does not exist"]),
    (["run", "--concurrency", "0"], ["concurrency must be > 0"]),
    (["run", "--concurrency", "-4"], ["must be > 0"]),
    (["run", "--concurrency", "two"], ["not a number", "--concurrency 1,4,16"]),
    (["run", "--slo", "ttft<2s"], ["SLO term", "--slo ttft_p95=2s"]),
    (["run", "--backends", "hf", "--quantization", "w4a16-awq"], ["hf cannot honour quantization=w4a16-awq"]),
    (["run", "--backends", "vllm", "--quantization", "w4a16-awq"], ["vllm cannot honour", "w4a16-awq", _WNA16_FIX]),
    (["run", "--max-num-seqs", "0"], ["max_num_seqs", "--max-num-seqs"]),
    (["run", "--dtype", "float64"], ["dtype"]),
    (["run", "--native", "vllm-swap_space"], ["BACKEND.KEY=VALUE"]),
    (["plan", "--backends", "vllm", "--block-size", "-16"], ["block_size"]),
    (["run", "--backends", "fake@ttft=5ms+ttft=6ms"], ["fake engine option ttft is given twice"]),
])
def test_bad_input(tmp_path, args, needles):
    out = tmp_path / "results"
    p = run_cli(*args, "--out", str(out)) if args[0] == "run" else run_cli(*args)
    assert_one_line_error(p, *needles)
    assert not out.exists(), "nothing may be written for bad input"


def test_malformed_yaml(tmp_path):
    bad = tmp_path / "w.yaml"
    bad.write_text("num_requests: [1, 2\ninput: {")
    p = run_cli("run", "--workload", str(bad), "--out", str(tmp_path / "r"))
    assert_one_line_error(p, "not valid YAML", "line")
    p = run_cli("run", "--spec", str(tmp_path / "missing.yaml"), "--out", str(tmp_path / "r"))
    assert_one_line_error(p, "missing.yaml", "does not exist")
    typo = tmp_path / "spec.yaml"
    typo.write_text("model: /m\nmax_num_seq: 4\n")
    p = run_cli("plan", "--spec", str(typo))
    assert_one_line_error(p, "spec.yaml line 2", "max_num_seq", "not a known field", "did you mean max_num_seqs")


def test_help_and_plan_work_without_vllm_installed():
    # sys.modules[name] = None makes `import vllm` raise ImportError, as on a machine without it
    code = ("import sys; sys.modules['vllm'] = None\n"
            "from compare.cli import main\n"
            "rc = main(['plan', '--backends', 'vllm', '--max-num-seqs', '8'])\n"
            "print('RC', rc)\n"
            "from backends import registry\n"
            "from adapters.spec import ServingSpec\n"
            "import asyncio\n"
            "b = registry.build('vllm', ServingSpec(model='/m'))\n"
            "try:\n"
            "    asyncio.run(b.__aenter__())\n"
            "except Exception as e:\n"
            "    print('ERR', type(e).__name__, e)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert "RC 0" in p.stdout and "max_num_seqs: 8" in p.stdout, p.stderr
    assert "ERR MissingFrameworkError" in p.stdout
    assert "llm-compare[cpu]" in p.stdout and "llm-compare[vllm]" in p.stdout
    h = subprocess.run([sys.executable, "-c", "import sys; sys.modules['vllm'] = None\n"
                        "from compare.cli import main; main(['--help'])"], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert h.returncode == 0 and "run" in h.stdout and "plan" in h.stdout


def test_plan_prints_native_config_without_starting_anything():
    p = run_cli("plan", "--backends", "vllm,hf", "--model", "/nowhere", "--max-num-seqs", "64",
                "--chunked-prefill", "false", "--format", "json")
    assert p.returncode == 0, p.stderr
    import json

    plan = json.loads(p.stdout)
    assert plan["backends"]["vllm"]["engine_args"]["max_num_seqs"] == 64
    assert plan["backends"]["vllm"]["engine_args"]["enable_chunked_prefill"] is False
    assert plan["backends"]["hf"]["not_applicable"] == {"max_num_seqs": 64, "chunked_prefill": False}
