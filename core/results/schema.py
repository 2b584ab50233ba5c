"""run.json's JSON Schema, generated from the models (core/results/models.py).

    python -m core.results.schema           rewrite core/results/run.schema.json
    python -m core.results.schema --check   exit 1 when the checked-in file is stale

The checked-in file is for readers outside Python (dashboards, other tools); a test fails when
the models change and the file was not regenerated.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from core.results.models import SCHEMA_VERSION, RunResults

SCHEMA_FILE = Path(__file__).with_name("run.schema.json")


def schema_text() -> str:
    schema = RunResults.model_json_schema(mode="serialization")
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema",
              "$id": f"llm-compare/run.schema.v{SCHEMA_VERSION}.json", **schema}
    return json.dumps(schema, indent=1, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    text = schema_text()
    if "--check" in args:
        if not SCHEMA_FILE.exists() or SCHEMA_FILE.read_text() != text:
            print(f"{SCHEMA_FILE} is stale: run `python -m core.results.schema`", file=sys.stderr)
            return 1
        return 0
    SCHEMA_FILE.write_text(text)
    print(f"wrote {SCHEMA_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
