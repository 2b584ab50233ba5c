"""`compare run`'s quality step as a user meets it: the engine answers the probes while it runs,
the float32 reference scores them once every engine has stopped, and the console says what was
measured, or skipped and why, and how to switch it."""
from __future__ import annotations

import json

import pytest

from tests.conftest import TINY_SPEC_ARGS, run_cli

pytestmark = pytest.mark.engine

SMALL = ("--num-requests", "3", "--input-len", "16", "--output-len", "8", "--warmup", "1", "--concurrency", "1")


def test_quality_on_is_scored_after_the_engine_stopped(tmp_path, tiny_model):
    p = run_cli("run", "--backends", "hf", "--model", str(tiny_model), *TINY_SPEC_ARGS, *SMALL,
                "--quality", "on", "--quality-device", "cpu", "--quality-prompts", "2",
                "--out", str(tmp_path), "--run-id", "q", env={"COLUMNS": "200"})
    assert p.returncode == 0, p.stderr[-3000:]
    q = json.loads((tmp_path / "q" / "run.json").read_text())["backends"]["hf"]["quality"]
    assert q["status"] == "measured", q
    assert q["reference"]["device"] == "cpu" and q["reference"]["when"].startswith("after every engine")
    assert q["prompts"] == 2 and q["token_agreement"] == 1.0  # the reference is the same fp32 model
    assert "hf quality: token agreement 1.0 vs the float32 reference on cpu" in p.stdout
    assert "quality: hf (vs the float32 reference on cpu" in p.stdout


def test_quality_skipped_says_why_and_how_to_switch_it(tmp_path, tiny_model):
    p = run_cli("run", "--backends", "hf", "--model", str(tiny_model), *TINY_SPEC_ARGS, *SMALL,
                "--out", str(tmp_path), "--run-id", "s", env={"COLUMNS": "200"})
    assert p.returncode == 0, p.stderr[-3000:]
    q = json.loads((tmp_path / "s" / "run.json").read_text())["backends"]["hf"]["quality"]
    assert q["status"] == "skipped" and "float32" in q["reason"]
    assert "quality skipped for hf: unquantized float32/auto run" in p.stdout
    assert "--quality on measures every backend" in p.stdout
