"""``compare merge``: runs of one comparison measured in parts become one run with repeats, whose
pooled rows are the ones ``compare run --repeats`` computes and whose verdict has intervals. That is
orchestration and statistics, so it runs on the fake engine (backends/fake/, a test instrument)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import cli

# two columns that differ (the verdict compares them); a request takes 24 or 20 ms, as what is
# checked is the bookkeeping of the rows and records, not the timings
A, B = "fake@ttft=10ms+itl=2ms", "fake@ttft=6ms+itl=2ms"
N = 4
LEVELS = ("c1", "c2")


def _run(out: Path, run_id: str, model: Path, backend: str, *extra: str) -> Path:
    p = cli("run", "--backends", backend, "--model", str(model), "--num-requests", str(N), "--input-len", "16",
                "--output-len", "8", "--concurrency", "1,2", "--warmup", "1", "--slo", "ttft_p95=2s",
                "--out", str(out), "--run-id", run_id, "-q", *extra)
    assert p.returncode == 0, p.stderr[-3000:]
    return out / run_id


def _merge(out: Path, run_id: str, *dirs: Path):
    return cli("merge", *map(str, dirs), "--out", str(out), "--run-id", run_id)


def _lines(d: Path) -> list[dict]:
    return [json.loads(x) for x in (d / "requests.jsonl").read_text().splitlines() if x.strip()]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_model):
    out = tmp_path_factory.mktemp("merge")
    made = {rid: _run(out, rid, tiny_model, be) for rid, be in
            (("a1", A), ("a2", A), ("b1", B), ("b2", B))}
    made["rep"] = _run(out, "rep", tiny_model, A, "--repeats", "2")
    made["other"] = _run(out, "other", tiny_model, A, "--workload-seed", "7")
    return out, made


def _split(rep: Path, out: Path) -> list[Path]:
    """A 2-repeat run as the two single-repeat runs it consists of: each repeat's row as the section's
    levels, its records with repeat 0 (what `compare run` without --repeats writes)."""
    doc = json.loads((rep / "run.json").read_text())
    parts = []
    for i in (0, 1):
        d = out / f"part{i}"
        d.mkdir()
        backends = {}
        for name, sec in doc["backends"].items():
            row = sec["repeats"][i]
            backends[name] = {**{k: v for k, v in sec.items() if k != "repeats"}, "levels": row["levels"],
                              "start_s": row["start_s"]}
        (d / "run.json").write_text(json.dumps({**doc, "run_id": f"part{i}", "repeats": 1, "backends": backends}))
        (d / "requests.jsonl").write_text("".join(json.dumps({**r, "repeat": 0}) + "\n"
                                                  for r in _lines(rep) if r["repeat"] == i))
        shutil.copy(rep / "workload.jsonl", d / "workload.jsonl")
        parts.append(d)
    return parts


def _same(a, b, where=""):
    """Equal field by field; floats to 1e-9 relative (a sum over records in another order)."""
    if isinstance(a, dict) and isinstance(b, dict):
        assert set(a) == set(b), f"{where}: keys {sorted(set(a) ^ set(b))}"
        for k in a:
            _same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) or isinstance(b, float):
        assert a == pytest.approx(b, rel=1e-9), where
    else:
        assert a == b, where


def test_merged_halves_give_the_pooled_rows_of_the_repeats_run(runs, tmp_path):
    out, made = runs
    rep = made["rep"]
    p = _merge(tmp_path, "m", *_split(rep, tmp_path))
    assert p.returncode == 0, p.stderr
    want, got = (json.loads((d / "run.json").read_text()) for d in (rep, tmp_path / "m"))
    assert got["repeats"] == 2 and got["status"] == "complete" and list(got["backends"]) == [A]
    w, g = want["backends"][A], got["backends"][A]
    _same(g["levels"], w["levels"], "levels")  # pooled: recomputed from the pooled records
    for label in LEVELS:
        assert g["levels"][label]["repeats"] == 2 and g["levels"][label]["requests"] == 2 * N
    _same(g["repeats"], w["repeats"], "repeats")  # per repeat: as measured
    key = lambda r: (r["repeat"], r["level"], r["request_id"])  # noqa: E731
    assert sorted(map(key, _lines(tmp_path / "m"))) == sorted(map(key, _lines(rep)))
    assert [m["run_id"] for m in got["merged_from"]] == ["part0", "part1"]
    assert [m["backends"] for m in got["merged_from"]] == [{A: [0]}, {A: [1]}]


def test_two_backends_two_runs_each_become_two_columns_with_intervals(runs, tmp_path):
    out, made = runs
    p = _merge(tmp_path, "m", made["a1"], made["b1"], made["a2"], made["b2"])
    assert p.returncode == 0, p.stderr
    d = tmp_path / "m"
    run = json.loads((d / "run.json").read_text())
    assert list(run["backends"]) == [A, B] and run["repeats"] == 2
    for name, first, second in ((A, "a1", "a2"), (B, "b1", "b2")):
        sec = run["backends"][name]
        assert [r["repeat"] for r in sec["repeats"]] == [0, 1]
        for row, src in zip(sec["repeats"], (first, second)):  # each input's rows kept as measured
            _same(row["levels"], json.loads((made[src] / "run.json").read_text())["backends"][name]["levels"])
        assert all(sec["levels"][lv]["requests"] == 2 * N for lv in LEVELS)
    seen = {(r["backend"], r["repeat"]) for r in _lines(d)}
    assert seen == {(A, 0), (A, 1), (B, 0), (B, 1)}
    assert run["merged_from"][2]["backends"] == {A: [1]} and run["merged_from"][2]["started_at"]
    assert (d / "logs").is_dir()

    from compare.analysis.verdict import verdict_json

    v = verdict_json(d)
    assert v["reference"] == A and v["comparisons"]
    assert all(c["ci"] is not None for c in v["comparisons"])  # 2 repeats each: intervals
    md = cli("report", str(d))
    assert md.returncode == 0, md.stderr
    assert "fewer than 2 repeats" not in md.stdout and "point estimate" not in md.stdout
    html = cli("report", str(d), "--html")
    assert html.returncode == 0 and (d / "report.html").stat().st_size > 0


def test_a_repeats_run_contributes_all_its_repeats(runs, tmp_path):
    _, made = runs
    out = tmp_path / "new" / "root"  # (created)
    p = _merge(out, "m", made["a1"], made["rep"])
    assert p.returncode == 0, p.stderr
    run = json.loads((out / "m" / "run.json").read_text())
    sec = run["backends"][A]
    assert run["repeats"] == 3 and [r["repeat"] for r in sec["repeats"]] == [0, 1, 2]
    assert [m["backends"] for m in run["merged_from"]] == [{A: [0]}, {A: [1, 2]}]
    assert all(sec["levels"][lv]["requests"] == 3 * N and sec["levels"][lv]["repeats"] == 3 for lv in LEVELS)
    rep = json.loads((made["rep"] / "run.json").read_text())["backends"][A]["repeats"]
    _same(sec["repeats"][2]["levels"], rep[1]["levels"])
    by_rep = {k: sum(1 for r in _lines(out / "m") if r["repeat"] == k) for k in (0, 1, 2)}
    assert by_rep == {0: 2 * N, 1: 2 * N, 2: 2 * N}  # two levels of N each
    assert sorted(x.name for x in out.iterdir()) == ["m"]  # nothing left beside it


def test_runs_of_different_backends_merge_into_columns(runs, tmp_path):
    _, made = runs
    p = _merge(tmp_path, "m", made["a1"], made["b1"])
    assert p.returncode == 0, p.stderr
    run = json.loads((tmp_path / "m" / "run.json").read_text())
    assert list(run["backends"]) == [A, B] and run["repeats"] == 1
    assert "repeats" not in run["backends"][A] and run["backends"][B]["levels"]["c2"]["requests"] == N


def _refused(p, *words: str) -> None:
    assert p.returncode == 2, p.stderr
    err = p.stderr.strip()
    assert "\n" not in err and "Traceback" not in err and all(w in err for w in words), err


def test_a_different_workload_is_refused_and_nothing_written(runs, tmp_path):
    _, made = runs
    _refused(_merge(tmp_path, "m", made["a1"], made["other"]), str(made["other"]), "workload.seed")
    assert list(tmp_path.iterdir()) == []


def test_different_levels_or_request_list_are_refused(runs, tmp_path):
    _, made = runs
    d = tmp_path / "lv"
    shutil.copytree(made["a2"], d)
    doc = json.loads((d / "run.json").read_text())
    (d / "run.json").write_text(json.dumps({**doc, "levels": doc["levels"][:1]}))
    _refused(_merge(tmp_path, "m", made["a1"], d), str(d), "levels")
    shutil.copy(made["a2"] / "run.json", d / "run.json")
    with open(d / "workload.jsonl", "a") as f:
        f.write((made["a2"] / "workload.jsonl").read_text().splitlines()[0] + "\n")
    _refused(_merge(tmp_path, "m", made["a1"], d), "workload.jsonl")
    assert not (tmp_path / "m").exists()


def test_not_a_results_dir_is_refused(runs, tmp_path):
    _, made = runs
    empty = tmp_path / "empty"
    empty.mkdir()
    _refused(_merge(tmp_path, "m", made["a1"], empty), str(empty), "run.json")
    _refused(_merge(tmp_path, "m", made["a1"], tmp_path / "nope"), "not a results directory")
    _refused(_merge(tmp_path, "m", made["a1"], made["a1"]), "given twice")
    _refused(_merge(tmp_path, "m", made["a1"]), "at least two")
    _refused(_merge(made["a1"].parent, "a2", made["a1"], made["b1"]), "already exists")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]


def test_records_that_do_not_match_run_json_are_refused(runs, tmp_path):
    """A damaged input (a level's records gone, records of a backend run.json lacks) was merged:
    its pooled rows were computed from records that were not there."""
    _, made = runs
    d = tmp_path / "gone"
    shutil.copytree(made["b1"], d)
    rows = [x for x in _lines(d) if x["level"] != "c2"]
    (d / "requests.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))
    _refused(_merge(tmp_path, "m", made["a1"], d), str(d), f"no record of backend {B} at level c2", "damaged")
    shutil.copy(made["b1"] / "requests.jsonl", d / "requests.jsonl")
    rows = _lines(d)
    rows[0]["backend"] = "ghost"
    (d / "requests.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))
    _refused(_merge(tmp_path, "m", made["a1"], d), "records of backend 'ghost'", "damaged")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gone"]
