"""Baselines and tune.json as typed models: what the tools wrote reads back unchanged, a file of
another layout is refused in one line, and the checked-in JSON Schemas match the models."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from compare.analysis.gate import load_baseline, make_baseline, save_baseline
from core.errors import UserError
from core.results.baseline import Baseline, checked_baseline
from core.results.schema import SCHEMAS, main as schema_main, schema_text
from core.results.tune import TuneResults, tune_json_text
from tests.synth import make_run, records

ROOT = Path(__file__).parents[2]
TUNES = sorted((ROOT / "benchmarks" / "results").glob("*/*/tune.json"))


def test_checked_in_schemas_match_the_models():
    # regenerate with `python -m core.results.schema` after changing a results model
    assert schema_main(["--check"]) == 0
    for path in SCHEMAS:
        schema = json.loads(schema_text(path))
        assert schema["$id"].startswith("llm-compare/") and schema["properties"], path.name
    tune = json.loads(schema_text(next(p for p in SCHEMAS if p.name == "tune.schema.json")))
    assert "schema" in tune["properties"] and "TunedBackend" in tune["$defs"]


@pytest.mark.parametrize("path", TUNES, ids=lambda p: p.parent.name)
def test_tune_json_written_by_compare_tune_round_trips(path):
    doc = json.loads(path.read_text())
    tune = TuneResults.model_validate(doc)
    assert json.loads(tune_json_text(tune)) == doc  # absent stays absent: the same file
    assert tune.backends and all(b.trials for b in tune.backends)


def test_tune_json_of_another_layout_is_refused(tmp_path):
    from compare.tuning.report import tuned_specs

    doc = json.loads(TUNES[0].read_text())
    doc["backends"][0]["best"] = {"config": {}, "goodput_req_s": {"mean": "fast"}}
    (tmp_path / "tune.json").write_text(json.dumps(doc))
    with pytest.raises(UserError, match=r"not a tune.json written by `compare tune` \(backends\.0\.best"):
        tuned_specs(str(tmp_path), ["vllm"], None)


def _baseline() -> Baseline:
    cells = {"vllm": [records("vllm", "c1", k) for k in range(3)]}
    run, recs = make_run(cells)
    return make_baseline(run, recs, name="b", workload_sha256="aaa", source="results/x")


def test_baseline_is_its_model_and_its_file_reads_back_the_same(tmp_path):
    base = _baseline()
    assert base.repeats == 3 and len(base.metrics["vllm"]["c1"]["ttft_p50"]) == 3
    assert base.fingerprint.backends["vllm"].framework == "vllm"
    path = save_baseline(base, tmp_path)
    doc = json.loads(path.read_text())
    # every field written (the format and version too), and the file reads back into the same model
    assert set(doc) == set(Baseline.model_fields) and doc["format"] == "llm-compare-baseline"
    assert load_baseline("b", tmp_path) == base == checked_baseline(doc, "b")


def test_baseline_of_another_layout_is_refused(tmp_path):
    base = _baseline().model_dump(exclude_unset=True)
    with pytest.raises(UserError, match=r"baseline b is not a valid llm-compare baseline \(metrics\.vllm\.c1"):
        checked_baseline({**base, "metrics": {"vllm": {"c1": {"ttft_p50": "slow"}}}}, "baseline b")
    with pytest.raises(UserError, match="repeat_count"):
        checked_baseline({**base, "repeat_count": 3}, "baseline b")
    # a GPU entry of another shape (the fingerprint's GPUs are run.json's hardware.gpus)
    fp = {**base["fingerprint"], "gpus": {"gpu0": {"name": "NVIDIA H200"}}}
    with pytest.raises(UserError, match=r"fingerprint\.gpus\.gpu0\.driver"):
        checked_baseline({**base, "fingerprint": fp}, "baseline b")
    (tmp_path / "b.json").write_text(json.dumps({**base, "slo": [{"metric": "ttft"}]}))
    with pytest.raises(UserError, match=r"baseline b \(.*b.json\) is not a valid llm-compare baseline \(slo\.0\.stat"):
        load_baseline("b", tmp_path)
