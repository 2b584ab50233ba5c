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


ARCHIVED = sorted((FIXTURES.parents[1] / "benchmarks" / "results").glob("**/run.json")) + [V1 / "run.json"]


def test_archived_runs_read_into_the_typed_sections_and_write_back_the_same():
    """Every run kept in the repository (schema 1 and 2): quality, max-rate and GPU entries read as
    their models and dump back to what the file holds."""
    seen = set()
    for path in ARCHIVED:
        doc = json.loads(path.read_text())
        again = dump(load_run(path))
        assert again["hardware"].get("gpus") == doc["hardware"].get("gpus"), path
        seen.update(["gpus"] if doc["hardware"].get("gpus") else [])
        for name, b in doc["backends"].items():
            for key in ("quality", "max_rate"):
                if key in b:
                    assert again["backends"][name][key] == b[key], (path, name, key)
                    seen.add(f"{key} {b[key].get('status', '')}")
    assert {"gpus", "quality measured", "quality skipped"} <= seen


def test_max_rate_section_round_trips_and_refuses_another_shape():
    from core.results.max_rate import MaxRate

    probe = {"rate": 8.0, "slo_met": True, "sustained": True, "slo_attainment": 1.0, "ok": 6, "requests": 6,
             "failed": 0, "req_s": 7.9, "output_tok_s": 63.0, "goodput_req_s": 7.9, "ttft_p95_ms": 20.0,
             "tpot_p95_ms": 5.0, "slo_checks": {"ttft_p95": {"value_ms": 20.0, "limit_ms": 60000.0, "met": True}},
             "met": True}
    section = {"slo": [{"metric": "ttft", "stat": "p95", "limit_ms": 60000.0}],
               "search": {"kind": "rate", "start": 8.0, "tol": 0.15, "max_probes": 2, "repeats": 1, "min_load": None,
                          "max_load": 1024.0, "warmup": 0, "timeout_s": 600.0, "seed": 0},
               "repeats": [{"repeat": 0, "status": "complete", "met": True, "max_rate": 8.0, "missed_at": None,
                            "highest_probed": 8.0, "probes": [probe]},
                           {"repeat": 1, "status": "interrupted", "probes": []}],
               "summary": {"n": 1, "met_starts": 1, "max_rates": [8.0], "missed_at": [None], "max_rate": 8.0,
                           "bounded": False, "verdict": "met"}}
    assert MaxRate.model_validate(section).model_dump(exclude_unset=True) == section
    no_met = {k: v for k, v in probe.items() if k != "met"}
    for bad, where in (({**section, "repeats": [{"repeat": 0, "status": "done"}]}, "repeats.0.status"),
                       ({**section, "repeats": [{"repeat": 0, "status": "running", "probes": [no_met]}]},
                        "repeats.0.probes.0.met"),
                       ({**section, "answer": 8.0}, "answer")):
        with pytest.raises(ValidationError, match=where.replace(".", r"\.")):
            MaxRate.model_validate(bad)


def test_quality_and_gpu_entries_of_another_shape_are_refused(tmp_path):
    shutil.copytree(V1, tmp_path / "r")
    doc = json.loads((tmp_path / "r" / "run.json").read_text())
    doc["schema_version"] = SCHEMA_VERSION
    name = next(iter(doc["backends"]))
    cases = [("quality", {"status": "measured", "reference": "/models/tiny"}, f"backends.{name}.quality.reference"),
             ("quality", {"status": "measured", "per_prompt": [{"tokens": 3}]}, "per_prompt.0.first_divergence"),
             ("gpus", [{"name": "NVIDIA H200", "driver": "580", "memory": "141 GiB"}], "hardware.gpus.0.compute_cap"),
             ("gpus", [{"name": "NVIDIA H200", "driver": "580", "memory": "141 GiB", "compute_cap": "9.0",
                        "uuid": "GPU-1"}], "hardware.gpus.0.uuid")]
    for key, value, where in cases:
        bad = json.loads(json.dumps(doc))
        if key == "gpus":
            bad["hardware"]["gpus"] = value
        else:
            bad["backends"][name]["quality"] = value
        (tmp_path / "r" / "run.json").write_text(json.dumps(bad))
        with pytest.raises(UserError) as e:
            load_run(tmp_path / "r")
        assert where in str(e.value) and "\n" not in str(e.value), str(e.value)
