"""Baselines and tune.json as typed models: what the tools wrote reads back unchanged, a file of
another layout is refused in one line, and the checked-in JSON Schemas match the models."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from compare.analysis.gate import make_baseline
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


def _baseline() -> dict:
    cells = {"vllm": [records("vllm", "c1", k) for k in range(3)]}
    run, recs = make_run(cells)
    return make_baseline(run, recs, name="b", workload_sha256="aaa", source="results/x")


def test_baseline_fits_its_model():
    base = _baseline()
    typed = Baseline.model_validate(base)
    assert typed.repeats == 3 and len(typed.metrics["vllm"]["c1"]["ttft_p50"]) == 3
    assert typed.fingerprint.backends["vllm"].framework == "vllm"
    assert checked_baseline(base, "b") is base


def test_baseline_of_another_layout_is_refused():
    base = _baseline()
    with pytest.raises(UserError, match=r"baseline b is not a valid llm-compare baseline \(metrics\.vllm\.c1"):
        checked_baseline({**base, "metrics": {"vllm": {"c1": {"ttft_p50": "slow"}}}}, "baseline b")
    with pytest.raises(UserError, match="repeat_count"):
        checked_baseline({**base, "repeat_count": 3}, "baseline b")
