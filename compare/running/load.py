"""The load a run offers, as the data the adapters size admission limits from (adapters.target.Load)."""
from __future__ import annotations

from typing import Sequence

from adapters.target import Load
from core.records import GenerationRequest
from compare.workload.schedule import LoadLevel


def offered_load(levels: Sequence[LoadLevel], requests: Sequence[GenerationRequest] | int | None) -> Load:
    """Highest number of requests in flight at once and the longest request (prompt + output tokens).

    A closed-loop level holds at most its concurrency (and no more than the level's requests); an
    open-loop level may hold every one of its requests at once (Poisson arrivals do not wait for
    completions). ``requests``: the run's request list, or only its size when it is not built
    (`compare plan`), or None when that is not known either."""
    n = requests if isinstance(requests, int) or requests is None else len(requests)
    if n is None:  # request count unknown: closed-loop levels uncapped, open-loop ones unbounded
        peaks = [int(lv.value) for lv in levels if lv.kind == "concurrency"]
    else:
        peaks = [min(int(lv.value), n) if lv.kind == "concurrency" else n for lv in levels]
    longest = None
    if not isinstance(requests, int) and requests is not None:
        sizes = [len(r.prompt_token_ids) + r.max_tokens for r in requests if r.prompt_token_ids is not None]
        longest = max(sizes) if sizes else None
    return Load(max_in_flight=max(peaks) if peaks and n != 0 else None, max_request_tokens=longest)
