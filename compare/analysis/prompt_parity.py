"""Did every engine see the same prompt? Per request, the prompt lengths the engines counted.

The workload sends every backend the identical request list, but with ``text`` or ``chat`` prompts
each engine tokenizes (and renders the chat template) itself, as it would in production. Engines
whose tokenizers disagree then serve prompts of different lengths, and their TTFT and throughput
describe different work. The count each engine reports (``prompt_tokens`` of its records: usage,
``tokens_evaluated``, the token ids it was given) is compared per request across backends: the
length most backends counted is the majority; a backend whose count is another one, or where no
length has a majority, differs on that request. ``token_ids`` prompts reach every engine as the
same ids (a difference then means an engine added or dropped tokens, e.g. a BOS).
"""
from __future__ import annotations

import os
from collections import Counter, defaultdict
from typing import Any, Iterable

from core.records import RequestRecord
from core.results import RunResults
from core.results.models import PromptDiff, PromptParity

DEFINITION = ("per request, the prompt length each backend's engine counted against the length most backends "
              "counted; a backend differs on a request where its count is another one or no length has a majority")


def prompt_parity(records: Iterable[RequestRecord]) -> PromptParity | None:
    """None when fewer than two backends counted some request's prompt (nothing to compare)."""
    counts: dict[str, dict[str, int]] = defaultdict(dict)  # request -> backend -> its count
    for r in records:
        if r.prompt_tokens is not None and r.error_kind is None:
            counts[r.request_id].setdefault(r.backend, r.prompt_tokens)  # levels/repeats send the same prompt
    shared = {rid: by for rid, by in counts.items() if len(by) >= 2}
    if not shared:
        return None
    compared: Counter[str] = Counter()
    differing: Counter[str] = Counter()
    deltas: dict[str, list[int]] = defaultdict(list)
    for by in shared.values():
        ranked = Counter(by.values()).most_common()
        majority = ranked[0][0] if len(ranked) == 1 or ranked[0][1] > ranked[1][1] else None
        for name, n in by.items():
            compared[name] += 1
            if n != majority:
                differing[name] += 1
                if majority is not None:
                    deltas[name].append(n - majority)
    return PromptParity(definition=DEFINITION, requests=len(shared), backends={
        name: PromptDiff(compared=compared[name], differing=differing[name],
                         min_delta=min(deltas[name]) if deltas[name] else None,
                         max_delta=max(deltas[name]) if deltas[name] else None)
        for name in compared if differing[name]})


def words(p: PromptParity | None, prompt_format: str | None) -> list[str]:
    """One caveat per backend whose engine saw other prompt lengths."""
    if p is None:
        return []
    fix = ("; --prompt-format token_ids sends every engine the same ids" if prompt_format in ("text", "chat")
           else "")
    if p.backends and all(d.min_delta is None for d in p.backends.values()):  # e.g. two backends: no majority
        names = list(p.backends)
        n = max(d.differing for d in p.backends.values())
        return [f"{', '.join(names[:-1])} and {names[-1]}: their engines counted different prompt lengths on {n} "
                f"of {p.requests} request(s): their tokenizers or chat templates differ, so their latencies are "
                f"for different prompts{fix}"]
    out = []
    for name, d in p.backends.items():
        by = ""
        if d.min_delta is not None and d.max_delta is not None:
            by = (f" ({d.min_delta:+d} token{'s' if abs(d.min_delta) != 1 else ''})" if d.min_delta == d.max_delta
                  else f" ({d.min_delta:+d} to {d.max_delta:+d} tokens)")
        out.append(f"{name}: its engine counted another prompt length than the other backends on {d.differing} of "
                   f"{d.compared} request(s){by}: its tokenizer or chat template differs, so its latencies are "
                   f"for other prompts{fix}")
    return out


def attach(writer: Any, results_dir: str | os.PathLike[str]) -> None:
    """Runner hook, after every backend finished: requests.jsonl -> the run's ``prompt_parity``."""
    from core.results import iter_records

    run: RunResults = writer.results
    if len(run.backends) < 2:
        return
    p = prompt_parity(iter_records(results_dir))
    if p is not None:
        writer.update(prompt_parity=p)
