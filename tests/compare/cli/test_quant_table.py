"""``compare quant run``'s side-by-side table from a run's typed sections (the engine run behind it:
tests/backends/models/test_quant_engine.py). Fed an archived H200 run, renamed per scheme."""
from __future__ import annotations

import json
from pathlib import Path

from compare.cli.commands.quant import side_by_side
from core.results import load_run

ROOT = Path(__file__).parents[3]


def test_rows_carry_quality_verification_and_speed_per_scheme(tmp_path):
    doc = json.loads((ROOT / "benchmarks/results/h200/2026-12-02-real-checkpoint/vllm-fp8/run.json").read_text())
    ((_, entry),) = doc["backends"].items()
    doc["backends"] = {"vllm:fp8": entry}
    (tmp_path / "run.json").write_text(json.dumps(doc))
    table = side_by_side(load_run(tmp_path), ["vllm:fp8", "vllm:absent"])
    row, absent = table["rows"]
    q, last = entry["quality"], list(entry["levels"].values())[-1]
    assert row["scheme"] == "fp8" and row["quality_status"] == "measured" == q["status"]
    assert row["token_agreement"] == q["token_agreement"] and row["kl_topk"] == q["kl_topk"]
    assert row["output_tok_s"] == last["output_tok_s"] and row["ttft_p50_ms"] == last["ttft_ms"]["p50"]
    assert row["valid"] == entry["quant_verification"]["valid"] and row["speedup"] == 1.0
    assert absent["status"] is None and absent["quality_status"] is None and absent["problems"] == []
    assert table["run_id"] == doc["run_id"] and table["baseline"] == "fp8"
