"""run.json as typed models: written through them, read back into them, schema 1 migrated, bad
files refused in one line, and the checked-in JSON Schema kept in step with the models."""
from __future__ import annotations

import json
import shutil
from dataclasses import replace

import pytest
from pydantic import ValidationError

from compare.analysis.metrics import summarize
from core.errors import UserError
from core.results import SCHEMA_VERSION, LevelSummary, ResultsWriter, RunResults, dump, load_results, load_run
from core.results.evolve import evolve
from core.results.schema import SCHEMA_FILE, main as schema_main, schema_text
from tests.conftest import FIXTURES
from tests.synth import records

V1 = FIXTURES / "results-v1"


def test_checked_in_schema_matches_the_models():
    # regenerate with `python -m core.results.schema` after changing core/results/models.py
    assert SCHEMA_FILE.read_text() == schema_text(), "run.schema.json is stale: python -m core.results.schema"
    assert schema_main(["--check"]) == 0
    schema = json.loads(SCHEMA_FILE.read_text())
    assert "LevelSummary" in schema["$defs"] and "ttft_ms" in schema["$defs"]["LevelSummary"]["properties"]


def test_writer_writes_through_the_models_and_reads_back(tmp_path):
    recs = records("vllm", "c1", 0)
    w = ResultsWriter(tmp_path, "r1", {"spec": {"model": "tiny", "quantization": "none"},
                                       "levels": [{"kind": "concurrency", "value": 1, "label": "c1"}]})
    s = evolve(summarize(recs, max(r.t_end_ns for r in recs)), loop_lag_ms={"max": 1.5, "p99": 1.0, "samples": 10},
               server_metrics={"vllm:anything": {"open": [1, 2]}})  # open by design
    w.update_backend("vllm", levels={"c1": s})
    w.finish("complete")
    on_disk = json.loads((tmp_path / "r1" / "run.json").read_text())
    assert on_disk["schema_version"] == SCHEMA_VERSION == 2
    run, got = load_results(tmp_path / "r1")
    assert isinstance(run, RunResults) and len(got) == 0
    lv = run.backends["vllm"].levels["c1"]
    assert isinstance(lv, LevelSummary) and lv.ok == 16 and lv.ttft_ms.p50 == pytest.approx(s.ttft_ms.p50)
    assert lv.loop_lag_ms.max == 1.5 and lv.server_metrics["vllm:anything"] == {"open": [1, 2]}
    assert dump(run) == on_disk  # absent stays absent: the file is exactly the model's dump
    with pytest.raises(ValidationError):  # frozen
        lv.ok = 3  # type: ignore[misc]


def test_a_metric_without_value_is_written_as_null(tmp_path):
    from core.slo import SLO

    w = ResultsWriter(tmp_path, "r1", {})
    failed = [replace(r, error_kind="timeout", error="t") for r in records("x", "c1", 0)]
    w.update_backend("x", levels={"c1": summarize(failed, 10**9, SLO.parse("ttft_p95=1s"))})
    w.flush()
    text = (tmp_path / "r1" / "run.json").read_text()
    assert "NaN" not in text and json.loads(text)["backends"]["x"]["levels"]["c1"]["slo_checks"]["ttft_p95"]["value_ms"] is None
    assert load_run(tmp_path / "r1").backends["x"].levels["c1"].slo_checks["ttft_p95"].met is False


def test_writer_refuses_an_undeclared_level_field(tmp_path):
    w = ResultsWriter(tmp_path, "r1", {})
    s = summarize(records("x", "c1", 0), 10**9)
    with pytest.raises(ValidationError, match="tpot_p95_ms"):  # where it is made, not at a later flush
        w.update_backend("x", levels={"c1": {**s.model_dump(exclude_unset=True), "tpot_p95_ms": 3.0}})
    with pytest.raises(ValidationError, match="tpot_p95_ms"):
        evolve(s, tpot_p95_ms=3.0)
    assert "x" not in w.results.backends  # nothing half-applied


def test_schema_1_results_load_as_schema_2():
    run = load_run(V1)
    assert run.schema_version == SCHEMA_VERSION and run.run_id == "topo-h200"
    s = run.backends["tp@2*vllm-server"].levels["r30"]
    assert s.requests == 512 and s.ttft_ms is not None and s.slo_checks["ttft_p95"].met is True


def test_schema_1_field_that_cannot_be_migrated_is_refused_naming_the_writer(tmp_path):
    shutil.copytree(V1, tmp_path / "r")
    doc = json.loads((tmp_path / "r" / "run.json").read_text())
    next(iter(doc["backends"].values()))["levels"]["r30"]["ttft_ms"] = [1.0, 2.0]  # an old list layout
    (tmp_path / "r" / "run.json").write_text(json.dumps(doc))
    with pytest.raises(UserError) as e:
        load_run(tmp_path / "r")
    msg = str(e.value)
    assert "\n" not in msg and "schema-1" in msg and "ttft_ms" in msg and "compare report" in msg
    assert "version not recorded" in msg  # this fixture's fingerprint predates the package version
    doc["hardware"]["packages"]["llm-compare"] = "0.1.0"
    (tmp_path / "r" / "run.json").write_text(json.dumps(doc))
    with pytest.raises(UserError, match=r"written by llm-compare 0\.1\.0 .*pip install llm-compare==0\.1\.0"):
        load_run(tmp_path / "r")


@pytest.mark.parametrize("text, words", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "not a run.json object"),
    (json.dumps({"schema_version": 7, "run_id": "x", "status": "complete"}), "schema_version 7"),
    (json.dumps({"schema_version": 2, "status": "complete"}), "run_id"),
    (json.dumps({"schema_version": 2, "run_id": "x", "status": "complete",
                 "backends": {"a": {"levels": {"c1": {"ok": "many"}}}}}), "backends.a.levels.c1"),
])
def test_corrupt_or_unknown_run_json_is_one_line_user_error(tmp_path, text, words):
    (tmp_path / "run.json").write_text(text)
    (tmp_path / "requests.jsonl").write_text("")
    with pytest.raises(UserError) as e:
        load_results(tmp_path)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_corrupt_requests_line_is_one_line_user_error(tmp_path):
    shutil.copytree(V1, tmp_path / "r")
    with open(tmp_path / "r" / "requests.jsonl", "a") as f:
        f.write('{"request_id": "half\n')
    with pytest.raises(UserError, match="corrupt line"):
        load_results(tmp_path / "r")
