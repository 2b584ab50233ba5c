"""What a reader must know before trusting a run's numbers, one sentence each."""
from __future__ import annotations

from typing import Any

from compare.analysis.client_health import distortion, lag_words
from compare.analysis.prompt_parity import words as prompt_words
from compare.analysis.steady import words as steady_words
from core.results import RunResults, as_run


def caveats(run: RunResults | dict[str, Any]) -> list[str]:
    """Things the reader must know before trusting the table."""
    run = as_run(run)
    out = []
    lagged = []  # one caveat for every lagging level: the same cause, said once
    for name, b in run.backends.items():
        if run.workload.ignore_eos and not b.forced_output_length:
            out.append(f"{name}: output length cannot be forced; compare length-matched tokens only")
        for label, s in b.levels.items():
            if s.client_lagged:
                lagged.append(f"{name} {label} {lag_words(s)}")
            elif s.client_health is not None:  # stalls too short or too rare to invalidate: said, with their reach
                d = distortion(s.client_health, MENTION_STALL_MS)
                if d:
                    out.append(f"{name} {label}: client {d}; not enough to invalidate the level")
            h = s.client_health
            if h is not None and h.preempted_sends:
                out.append(f"{name} {label}: {h.preempted_sends} request(s) left while the client had lost its CPU "
                           f"around the write (up to {h.preempted_send_max_ms:.1f} ms): each is timed from just "
                           f"before its write, so its TTFT may hold up to that much client time")
            if s.steady_state is not None:  # a time-bounded level: what was measured, what was left out
                out.append(f"{name} {steady_words(label, s.steady_state)}")
            if s.short_outputs:
                out.append(f"{name} {label}: {s.short_outputs} request(s) returned fewer tokens than asked")
            if s.coordinated_omission and s.send_delay_ms:
                out.append(f"{name} {label}: requests left late (send delay p50 {s.send_delay_ms.p50:.1f} ms, p99 "
                           f"{s.send_delay_ms.p99:.1f} ms, max {s.send_delay_ms.max:.1f} ms): the client held back "
                           f"load it was to offer (coordinated omission); latencies count from when each request "
                           f"left, so they are not inflated, but the offered load was lower than planned")
            refused = (s.errors or {}).get("overloaded", 0)
            if refused:  # a refusal is the server's admission limit, not a failed generation
                out.append(f"{name} {label}: the server refused load: {refused} request(s) rejected as overloaded "
                           f"(HTTP 429 / TGI \"Model is overloaded\"); raise its admission limit (TGI: --native "
                           f"tgi.--max-concurrent-requests=N)")
            if s.failed - refused > 0:
                out.append(f"{name} {label}: {s.failed - refused} failed request(s): "
                           f"{ {k: v for k, v in s.errors.items() if k != 'overloaded'} }")
        if b.error:
            out.append(f"{name}: {b.error}")
    if lagged:
        out.insert(0, f"client fell behind ({'; '.join(lagged)}): those results are marked invalid, "
                      f"the client, not the engine, may be the bottleneck" + _lag_why(run))
    out += prompt_words(run.prompt_parity, (run.workload.model_extra or {}).get("prompt_format"))
    for label, lv in (run.length_matched.levels if run.length_matched else {}).items():
        dropped = lv.excluded_failed + lv.excluded_empty
        if dropped:
            out.append(f"length-matched {label}: {dropped} of {lv.requests} request(s) left out "
                       f"(failed on some backend: {lv.excluded_failed}, no token: {lv.excluded_empty})")
    return out


MENTION_STALL_MS = 10.0  # a stall shorter than this that touched a few observations is not worth a line


def _lag_why(run: RunResults) -> str:
    from compare.analysis.bottleneck import lag_explanations  # CPU telemetry per level, where recorded

    why = lag_explanations(run)
    return f" (telemetry: {why})" if why else ""
