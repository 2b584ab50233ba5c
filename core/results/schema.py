"""The results files' JSON Schemas, generated from their models: run.json (core/results/models.py),
baselines (core/results/baseline.py) and tune.json (core/results/tune.py).

    python -m core.results.schema           rewrite the checked-in *.schema.json next to this file
    python -m core.results.schema --check   exit 1 when a checked-in file is stale

The checked-in files are for readers outside Python (dashboards, other tools); a test fails when
the models change and the files were not regenerated.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from pydantic import BaseModel

from core.results.baseline import Baseline
from core.results.models import SCHEMA_VERSION, RunResults
from core.results.tune import TuneResults

HERE = Path(__file__).parent
SCHEMA_FILE = HERE / "run.schema.json"
# file -> (model, its $id)
SCHEMAS: dict[Path, tuple[type[BaseModel], str]] = {
    SCHEMA_FILE: (RunResults, f"llm-compare/run.schema.v{SCHEMA_VERSION}.json"),
    HERE / "baseline.schema.json": (Baseline, "llm-compare/baseline.schema.v1.json"),
    HERE / "tune.schema.json": (TuneResults, "llm-compare/tune.schema.v1.json"),
}


def schema_text(path: Path = SCHEMA_FILE) -> str:
    model, schema_id = SCHEMAS[path]
    schema = model.model_json_schema(mode="serialization", by_alias=True)
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": schema_id, **schema}
    return json.dumps(schema, indent=1, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if "--check" in args:
        stale = [p for p in SCHEMAS if not p.exists() or p.read_text() != schema_text(p)]
        for p in stale:
            print(f"{p} is stale: run `python -m core.results.schema`", file=sys.stderr)
        return 1 if stale else 0
    for p in SCHEMAS:
        p.write_text(schema_text(p))
        print(f"wrote {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
