"""Length-matched comparison: when output lengths were not forced, compare only the tokens that
every backend produced for a request.

Why: TGI has no ignore_eos, so with ``workload.ignore_eos: true`` its outputs may stop at EOS
while vLLM's run to max_tokens. Its raw E2E and tok/s then describe less work (and a different
mix of prefill and decode), so raw numbers are not comparable. Definitions, per load level, over
the backends that have records at that level (request ids are identical across backends):

- k(request) = min over backends and repeats of the tokens streamed by its ok records (the sum of
  ``event_token_counts``: only streamed tokens have a timestamp). A request that failed or is
  missing on any backend/repeat is excluded (``excluded_failed``), one where some backend
  streamed no token is excluded too (``excluded_empty``).
- Every record is cut to its first k tokens (``truncate``): the events up to the one carrying the
  k-th token, that event's count trimmed, the stream "ending" at that event (t_k). The ordinary
  compare/analysis/metrics.py definitions then apply unchanged, with the same attribution of a
  multi-token event's gap to its first token: TTFT (unchanged), E2E@k = t_k - send,
  TPOT@k = (t_k - t_1) / (k - 1), ITLs of tokens 2..k.
- output tok/s@k = sum of k over the matched requests / matched window, the window running from
  the first send to the latest t_k of those requests (per repeat; repeats' windows are summed,
  as for the raw pooled summary). This is the level's throughput with only matched tokens
  counted; only the tail after the last matched token is removed. A backend that generated
  beyond k still spent part of the window on its extra tokens (they share batches with matched
  tokens, and in a closed loop they delay later sends), so for that backend the number is a
  conservative (low) estimate; ``matched_fraction`` (matched / all streamed tokens) says how
  much was cut. Per-request TPOT@k / E2E@k are not affected by this.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any, Iterable

from compare.analysis.metrics import summarize
from core.metrics import REGISTRY
from core.records import RequestRecord
from core.results import LengthMatched, LevelSummary, RunResults, as_run
from core.slo import SLO

DEFINITION = ("per request only the first k tokens, k = fewest any backend streamed for it; TTFT "
              "unchanged, E2E/TPOT/ITL end at token k, tok/s = matched tokens / (first send .. last "
              "k-th token); docs/length-matching.md")
# summary keys that stay meaningful after the cut (send delays, errors, engine-side stamps do not)
_KEEP = ("requests", "ok", "wall_s", "output_tokens", "input_tokens", "req_s",
         *(m.summary_key for m in REGISTRY), "slo_attainment", "slo_checks", "slo_met")


def stream_tokens(r: RequestRecord) -> int:
    return sum(r.event_token_counts)


def truncate(r: RequestRecord, k: int) -> RequestRecord:
    """The record as if its stream had ended right after its k-th token (k >= 1)."""
    seen = 0
    for j, c in enumerate(r.event_token_counts):
        seen += c
        if seen >= k:
            break
    else:
        raise ValueError(f"{r.request_id}: cut at {k} tokens, but only {seen} were streamed")
    counts = r.event_token_counts[:j] + (c - (seen - k),)
    return replace(r, event_times_ns=r.event_times_ns[: j + 1], event_token_counts=counts,
                   token_ids=r.token_ids[:k], t_end_ns=r.event_times_ns[j], usage_completion_tokens=k,
                   requested_tokens=k, logprobs=r.logprobs[:k] if r.logprobs else r.logprobs)


def reason(run: RunResults | dict[str, Any], records: list[RequestRecord]) -> str | None:
    """Why this run needs length matching, or None (lengths forced and observed equal)."""
    run = as_run(run)
    if len({r.backend for r in records}) < 2:
        return None  # nothing to compare
    cannot = [n for n, b in run.backends.items() if not b.forced_output_length]
    if cannot:
        return f"{', '.join(cannot)}: output length cannot be forced (no ignore_eos)"
    lengths: dict[tuple[str, str], set[int]] = {}
    for r in records:
        if r.ok:
            lengths.setdefault((r.level, r.request_id), set()).add(stream_tokens(r))
    differ = sum(1 for v in lengths.values() if len(v) > 1)
    return f"observed output lengths differ for {differ} request(s)" if differ else None


@dataclass
class LevelMatch:
    level: str
    requests: int
    k: dict[str, int]  # request id -> matched tokens
    excluded_failed: int
    excluded_empty: int
    pooled: dict[str, dict[str, Any]] = field(default_factory=dict)  # backend -> summary
    per_repeat: dict[str, dict[int, dict[str, Any]]] = field(default_factory=dict)
    cut: list[RequestRecord] = field(default_factory=list)  # matched records, truncated at k

    def as_dict(self) -> dict[str, Any]:
        ks = list(self.k.values())
        backends = {}
        for name, s in self.pooled.items():
            reps = self.per_repeat.get(name, {})
            backends[name] = {**s, **({"repeats": {str(i): v for i, v in reps.items()}} if len(reps) > 1 else {})}
        return {"requests": self.requests, "matched": len(ks), "excluded_failed": self.excluded_failed,
                "excluded_empty": self.excluded_empty, "matched_tokens_per_backend": sum(ks),
                "k": {"min": min(ks), "mean": sum(ks) / len(ks), "max": max(ks)} if ks else None,
                "k_by_request": self.k, "backends": backends}


def _slo(run: RunResults) -> SLO:
    return SLO.from_json([t.model_dump() for t in run.slo])


def _window_ns(cut: list[RequestRecord]) -> int:
    return (max(r.t_end_ns for r in cut) - min(r.t_sent_ns for r in cut)) if cut else 0


def _summary(cut: list[RequestRecord], raw: list[RequestRecord], window_ns: int,
             slo: SLO) -> dict[str, Any]:
    s = summarize(cut, window_ns, slo).model_dump(include=set(_KEEP), exclude_unset=True)
    streamed = sum(stream_tokens(r) for r in raw if r.ok)
    s["streamed_tokens"] = streamed
    s["matched_fraction"] = s["output_tokens"] / streamed if streamed else None
    return s


def match_level(level: str, records: list[RequestRecord], slo: SLO = SLO()) -> LevelMatch:
    """Length matching of one level's records (every backend, every repeat)."""
    cells: dict[tuple[str, int], list[RequestRecord]] = {}
    by_id: dict[str, list[RequestRecord]] = {}
    for r in records:
        if r.trimmed is not None:  # outside a time-bounded level's steady state
            continue
        cells.setdefault((r.backend, r.repeat), []).append(r)
        by_id.setdefault(r.request_id, []).append(r)
    k: dict[str, int] = {}
    failed = empty = 0
    for rid, recs in sorted(by_id.items()):
        present = {(r.backend, r.repeat) for r in recs if r.ok}
        if len(present) < len(cells) or not all(r.ok for r in recs):
            failed += 1
        elif (m := min(stream_tokens(r) for r in recs)) == 0:
            empty += 1
        else:
            k[rid] = m
    lm = LevelMatch(level, len(by_id), k, failed, empty)
    pooled: dict[str, tuple[list[RequestRecord], list[RequestRecord], int]] = {}
    for (name, rep), recs in sorted(cells.items()):
        cut = [truncate(r, k[r.request_id]) for r in recs if r.request_id in k]
        lm.cut += cut
        lm.per_repeat.setdefault(name, {})[rep] = _summary(cut, recs, _window_ns(cut), slo)
        c, raw, wall = pooled.get(name, ([], [], 0))
        pooled[name] = (c + cut, raw + recs, wall + _window_ns(cut))
    for name, (cut, raw, wall) in pooled.items():  # repeats pooled: windows summed, as the raw pool
        lm.pooled[name] = _summary(cut, raw, wall, slo)
    return lm


def match_run(run: RunResults | dict[str, Any], records: Iterable[RequestRecord]
              ) -> dict[str, LevelMatch] | None:
    """Every level of a run, or None when the run does not need length matching."""
    run = as_run(run)
    recs = list(records)
    if reason(run, recs) is None:
        return None
    levels: dict[str, list[RequestRecord]] = {}
    for r in recs:
        levels.setdefault(r.level, []).append(r)
    order = run.level_labels
    order += sorted(set(levels) - set(order))
    return {lb: match_level(lb, levels[lb], _slo(run)) for lb in order if lb in levels}


def section(run: RunResults | dict[str, Any], records: Iterable[RequestRecord],
            levels: dict[str, LevelMatch] | None = None) -> LengthMatched | None:
    """run.json's additive ``length_matched`` section (None when not needed)."""
    recs = list(records)
    levels = levels if levels is not None else match_run(run, recs)
    if levels is None:
        return None
    return LengthMatched.model_validate({"reason": reason(run, recs), "definition": DEFINITION,
                                         "levels": {lb: m.as_dict() for lb, m in levels.items()}})


def attach(writer: Any, results_dir: str | os.PathLike[str]) -> None:
    """Runner hook, after every backend finished: post-processes requests.jsonl into the
    writer's run (a ``ResultsWriter``)."""
    from core.results import iter_records

    s = section(writer.results, iter_records(results_dir))
    if s is not None:
        writer.update(length_matched=s)


def _merged(s: LevelSummary, matched: dict[str, Any] | None) -> LevelSummary:
    """A level summary with the matched values in place of the raw ones it has."""
    if not matched:
        return s
    keep = {k: v for k, v in matched.items() if k in LevelSummary.model_fields}
    return LevelSummary.model_validate({**s.model_dump(exclude_unset=True), **keep})


def matched_inputs(run: RunResults | dict[str, Any], levels: dict[str, LevelMatch]
                   ) -> tuple[RunResults, list[RequestRecord]]:
    """(run, records) as the statistics see them after matching (``levels`` from match_run):
    records cut at k, every level summary (pooled and per repeat) with the matched values."""
    run = as_run(run)
    backends = {}
    for name, entry in run.backends.items():
        update: dict[str, Any] = {"levels": {
            lb: _merged(s, levels[lb].pooled.get(name)) if lb in levels else s for lb, s in entry.levels.items()}}
        if entry.repeats:
            update["repeats"] = [rp.model_copy(update={"levels": {
                lb: _merged(s, levels[lb].per_repeat.get(name, {}).get(rp.repeat)) if lb in levels else s
                for lb, s in rp.levels.items()}}) for rp in entry.repeats]
        backends[name] = entry.model_copy(update=update)
    return run.model_copy(update={"backends": backends}), [r for m in levels.values() for r in m.cut]
