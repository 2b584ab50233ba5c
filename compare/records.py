"""Immutable per-request records: the raw material every metric is computed from."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class RequestRecord:
    request_id: str
    backend: str
    level: str
    t_sent_ns: int  # perf_counter_ns() just before the request was handed to the backend
    t_scheduled_ns: int | None = None  # intended send time (open loop), same clock
    event_times_ns: tuple[int, ...] = ()  # one stamp per streamed event
    event_token_counts: tuple[int, ...] = ()  # tokens carried by each event
    token_ids: tuple[int, ...] = ()
    t_end_ns: int | None = None  # StreamEnd (or failure) time
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    usage_completion_tokens: int | None = None
    requested_tokens: int | None = None
    error_kind: str | None = None
    error: str | None = None
    engine_metrics: dict[str, float] = field(default_factory=dict)
    logprobs: tuple[float, ...] | None = None
    repeat: int = 0  # which repeat of the backend (``compare run --repeats``) produced it

    @property
    def ok(self) -> bool:
        return self.error_kind is None

    @property
    def output_tokens(self) -> int:
        """Counted from token ids; falls back to the server's usage when ids are not streamed."""
        if self.token_ids:
            return len(self.token_ids)
        if self.event_token_counts:
            return sum(self.event_token_counts)
        return self.usage_completion_tokens or 0

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("event_times_ns", "event_token_counts", "token_ids", "logprobs"):
            if d[k] is not None:
                d[k] = list(d[k])
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "RequestRecord":
        d = dict(d)
        for k in ("event_times_ns", "event_token_counts", "token_ids"):
            d[k] = tuple(d.get(k) or ())
        if d.get("logprobs") is not None:
            d["logprobs"] = tuple(d["logprobs"])
        return cls(**d)
