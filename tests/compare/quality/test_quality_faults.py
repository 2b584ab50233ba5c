"""The deferred quality step failing or killed after every engine stopped: the speed results stay
as measured, quality says "not measured" and why. The fault is injected where the step begins
(placing the float32 reference), in the `compare` process itself: an exception, SIGTERM, SIGKILL.
The fake engine answers the probes, so no engine starts; one test loads a real reference whose
weights are damaged."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT, TINY_SPEC_ARGS, cli, run_cli

# (4 output tokens: the fake's requests take 35 ms, the levels' timings are not the subject)
_RUN = ("run", "--backends", "fake", "--num-requests", "3", "--output-len", "4", "--concurrency", "1,2",
        "--quality", "on", "--quality-prompts", "2")

# `compare` with the quality step's first act (placing the reference) replaced by a fault
_DRIVER = """
import asyncio, os, signal, sys
import compare.quality.deferred as deferred
fault = sys.argv[1]

def place(model, opts):  # the reference's placement fails: a GPU in a bad state
    raise RuntimeError("CUDA error: an illegal memory access was encountered")

async def score(pending, opts, status):  # a signal while the reference scores (it awaits its answers)
    os.kill(os.getpid(), getattr(signal, fault))
    await asyncio.sleep(30)

if fault == "raise":
    deferred.place = place
else:
    deferred.score = score
from compare.cli.main import main
sys.exit(main(sys.argv[2:]))
"""


def _faulted(fault: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _DRIVER, fault, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def _speed_intact(run: dict) -> dict:
    be = run["backends"]["fake"]
    assert sorted(be["levels"]) == ["c1", "c2"], be
    assert all(lv["requests"] == lv["ok"] == 3 for lv in be["levels"].values()), be["levels"]
    return be


def test_a_quality_step_that_fails_keeps_the_run_complete(tmp_path):
    p = _faulted("raise", *_RUN, "--out", str(tmp_path), "--run-id", "f")
    assert p.returncode == 0, p.stderr[-3000:]
    assert "Traceback" not in p.stderr + p.stdout
    run = json.loads((tmp_path / "f" / "run.json").read_text())
    assert run["status"] == "complete"
    be = _speed_intact(run)
    assert be["status"] == "complete"
    assert be["quality"]["status"] == "failed"
    assert be["quality"]["reason"].startswith("not measured: the quality step failed after every engine stopped "
                                              "(RuntimeError: CUDA error")
    assert len((tmp_path / "f" / "requests.jsonl").read_text().splitlines()) == 6


def test_a_quality_step_stopped_by_sigterm(tmp_path):
    p = _faulted("SIGTERM", *_RUN, "--out", str(tmp_path), "--run-id", "t")
    assert p.returncode == 143, p.stderr[-3000:]
    assert "Traceback" not in p.stderr + p.stdout
    run = json.loads((tmp_path / "t" / "run.json").read_text())
    assert run["status"] == "interrupted"
    be = _speed_intact(run)
    assert be["quality"] == {"status": "skipped", "reason": "the run was stopped before the reference scored it"}


def test_a_quality_step_killed_outright(tmp_path):
    p = _faulted("SIGKILL", *_RUN, "--out", str(tmp_path), "--run-id", "k")
    assert p.returncode == -9, p.stderr[-3000:]
    d = tmp_path / "k"
    assert json.loads((d / "run.json").read_text())["status"] == "running"  # (it could not finish its record)
    rep = run_cli("report", str(d))
    assert rep.returncode == 0, rep.stderr[-3000:]
    assert f"run k in {d} was killed (its process is gone)" in rep.stderr
    run = json.loads((d / "run.json").read_text())
    assert run["status"] == "killed" and "quality of fake not measured (killed before the reference" in run["error"]
    be = _speed_intact(run)
    assert be["status"] == "complete"  # (its engine had finished and stopped)
    assert be["quality"] == {"status": "skipped",
                             "reason": "not measured: the run was killed before the float32 reference scored it"}


@pytest.mark.engine
def test_a_reference_whose_weights_are_damaged(tmp_path, tiny_model):
    """A real load of the float32 reference fails (its safetensors header is garbage)."""
    ref = tmp_path / "ref"
    ref.mkdir()
    for f in tiny_model.iterdir():
        if f.is_file() and f.suffix != ".safetensors":
            (ref / f.name).write_bytes(f.read_bytes())
    (ref / "model.safetensors").write_bytes(b"\xff" * 5000)
    p = run_cli("run", "--backends", "fake", "--model", str(tiny_model), *TINY_SPEC_ARGS, "--num-requests", "3",
                "--concurrency", "1,2", "--quality", "on", "--quality-prompts", "2", "--quality-device", "cpu",
                "--quality-reference", str(ref), "--out", str(tmp_path), "--run-id", "d")
    assert p.returncode == 0, p.stderr[-3000:]
    run = json.loads((tmp_path / "d" / "run.json").read_text())
    assert run["status"] == "complete"
    q = _speed_intact(run)["quality"]
    assert q["status"] == "failed" and "could not load" in q["reason"] and str(ref) in q["reason"], q


@pytest.mark.parametrize("text", ["[1, 2]", "{half", '{"source": 5}'])
def test_a_damaged_quantization_record_means_no_reference(tmp_path, tiny_model, text):
    """A checkpoint's llm_compare_quant.json (written by `compare quantize`: where its float
    reference is) damaged: quality is skipped saying so; the speed run goes on."""
    model = tmp_path / "m"
    model.mkdir()
    for f in tiny_model.iterdir():
        if f.is_file():
            (model / f.name).symlink_to(f)
    (model / "llm_compare_quant.json").write_text(text)
    p = cli(*_RUN, "--model", str(model), "--out", str(tmp_path), "--run-id", "p")  # (in this process)
    assert p.returncode == 0, p.stderr[-3000:]
    run = json.loads((tmp_path / "p" / "run.json").read_text())
    q = _speed_intact(run)["quality"]
    assert q["status"] == "skipped" and "no local reference model" in q["reason"], q
