"""Results directories: typed run.json (models), writing and reading (io), older layouts (migrate)."""
from core.results.io import ResultsWriter, as_run, dump, iter_records, load_results, load_run, new_run_id
from core.results.dist import Dist
from core.results.models import (
    SCHEMA_VERSION, BackendResult, LengthMatched, LevelSummary, MatchedLevel, MatchedSummary, RunResults,
)

__all__ = ["SCHEMA_VERSION", "BackendResult", "Dist", "LengthMatched", "LevelSummary", "MatchedLevel",
           "MatchedSummary", "ResultsWriter", "RunResults", "as_run", "dump", "iter_records", "load_results",
           "load_run", "new_run_id"]
