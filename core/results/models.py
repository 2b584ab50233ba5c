"""Typed run.json: what a results directory's summary holds, field by field.

The runner builds these models while it measures (summarize -> LevelSummary, backend sections
replaced through core/results/evolve.py), the writer holds a ``RunResults`` (so a field nobody
declared fails where it is made, not in a report months later) and every read comes back as
these frozen models. The JSON Schema generated from
them is checked in next to this file (run.schema.json; ``python -m core.results.schema``).

``extra`` is allowed only where a section is open by design: engine-specific configuration and
server metrics, a backend's self-description, and provenance sections a harness adds to the run
header. Sections other features fill live beside this file: quality.py, max_rate.py, slo.py.
"""
from __future__ import annotations

from typing import Any

from pydantic import Field

from core.backend_info import BackendDescription, Capabilities
from core.results.base import Closed as _Closed, Open as _Open
from core.results.client_health import ClientHealth
from core.results.max_rate import MaxRate
from core.results.quality import Quality
from core.results.sections import LevelShards, MergedInput, QuantVerification, RayCell, RayNode
from core.results.slo import SloCheck, SloLimit
from core.results.dist import Dist
from core.results.sessions import SessionStats
from core.results.steady import SteadyState
from core.results.telemetry import Telemetry

SCHEMA_VERSION = 2


# ---------------------------------------------------------------- one level's numbers


class LoopLag(_Closed):
    """How late the client's event loop woke up during the level (client overload check)."""

    max: float = 0.0
    p99: float | None = None
    samples: int | None = None


class ClientProcess(_Closed):
    """One client process of a level sent by several (compare/running/multiproc.py)."""

    process: int  # 1-based
    pid: int | None = None
    requests: int | None = None  # records it sent (None: it died before reporting)
    loop_lag_ms: LoopLag | None = None
    cpu_s: float | None = None  # user + system CPU over the level
    cpu_util: float | None = None  # cpu_s / the level's wall time in that process (1.0 = one core)
    # which clock stamped its events: the backend's describe().extra["event_clock"], engine-specific
    event_clock: dict[str, Any] | None = None


class ClientProcs(_Closed):
    n: int
    processes: list[ClientProcess] = Field(default_factory=list)


class BucketBound(_Closed):
    """A quantile of a server-side Prometheus histogram, known only to its bucket: ``lo < q <= hi``
    (ms; ``hi`` None: above the last finite bucket). Never a number interpolated inside a bucket."""

    lo: float
    hi: float | None = None

    def text(self) -> str:
        if self.hi is None:
            return f"> {self.lo:g}"
        return f"<= {self.hi:g}" if self.lo == 0 else f"({self.lo:g}, {self.hi:g}]"


class ServerHistogram(_Open):
    """One histogram's observations during a level (backends/server_metrics.py). ``mean`` is exact
    (sum/count deltas); quantiles are bucket bounds. Open: results written before bounds existed
    carry interpolated ``p50``/``p95``/``p99`` numbers, which readers ignore."""

    count: float
    mean: float
    quantiles: dict[str, BucketBound] = Field(default_factory=dict)  # "p50" -> its bucket


class GaugeSummary(_Closed):
    """A server gauge (e.g. vllm:num_requests_running) sampled while the level's load was at its
    target; ``measured`` False (and no numbers) when too few samples fell in that window."""

    measured: bool
    samples: int  # kept (inside the steady window)
    samples_total: int  # scraped during the level
    window_s: float | None = None  # length of the steady window
    mean: float | None = None
    max: float | None = None
    client_in_flight_mean: float | None = None  # the client's own in-flight count at the same instants
    note: str | None = None


class PrefixCacheStats(_Closed):
    """Prefix-cache hits during the level, in prompt tokens (vLLM counts tokens, not requests)."""

    source: str  # where the counts come from, or why there are none
    queries: float | None = None
    hits: float | None = None
    hit_rate: float | None = None  # hits / queries; None when not exposed or nothing queried


class TimeBreakdown(_Closed):
    """Where a request's time went, means in ms (compare/analysis/breakdown.py): in the engine
    (queued, prefill, decode) and outside it (client, API server, network, tokenisation)."""

    source: str  # "engine stamps" (per request) | "server histograms" (sum/count)
    n: int
    queued_ms: float | None = None
    prefill_ms: float | None = None
    decode_ms: float | None = None
    inference_ms: float | None = None  # prefill + decode where the engine reports only the sum (TGI)
    engine_e2e_ms: float | None = None
    # servers: engine E2E minus queued+prefill+decode (vLLM's frontend: tokenisation, IPC, detokenisation)
    frontend_ms: float | None = None
    client_e2e_ms: float | None = None
    outside_ms: float | None = None  # client e2e - engine e2e
    client_ttft_ms: float | None = None
    engine_ttft_ms: float | None = None


class _Measured(_Closed):
    """Fields shared by a raw level summary and a length-matched one."""

    requests: int
    ok: int
    wall_s: float
    output_tokens: int
    input_tokens: int
    output_tok_s: float
    req_s: float
    ttft_ms: Dist | None = None
    tpot_ms: Dist | None = None
    itl_ms: Dist | None = None
    e2e_ms: Dist | None = None
    # with an SLO only
    goodput_req_s: float | None = None
    slo_attainment: float | None = None
    slo_checks: dict[str, SloCheck] | None = None
    slo_met: bool | None = None


class LevelSummary(_Measured):
    """One backend at one load level (one repeat, or every repeat pooled)."""

    failed: int = 0
    errors: dict[str, int] = Field(default_factory=dict)  # failure kind -> count
    send_delay_ms: Dist | None = None  # how late requests left vs the schedule (open loop) / when ready (closed)
    # send delay p99 over compare.analysis.metrics.COORDINATED_OMISSION_MS: load was held back
    coordinated_omission: bool = False
    short_outputs: int = 0  # ok requests that returned fewer tokens than asked
    # engine-core stamps on the client's clock (in-process vLLM only)
    engine_output_tok_s: float | None = None
    delivery_lag_ms: Dist | None = None
    loop_lag_ms: LoopLag | None = None
    # the client fell behind (its numbers are invalid): lag that lasted, not one spike (client_health.why)
    client_lagged: bool = False
    client_health: ClientHealth | None = None  # absent in runs recorded before it (and multi-process levels)
    client_procs: ClientProcs | None = None  # the level was sent by several client processes
    # scraped around the level; open by design: each engine exports its own metric names and
    # layout (typed views: server_histogram() and the derived server_gauges/time_breakdown below)
    server_metrics: dict[str, Any] | None = None
    # derived from server_metrics and the records (compare/analysis/breakdown.py)
    server_gauges: dict[str, GaugeSummary] | None = None
    prefix_cache: PrefixCacheStats | None = None
    time_breakdown: TimeBreakdown | None = None
    schedule_offsets_ns: list[int] | None = None
    aborted: str | None = None  # why the level stopped early
    repeats: int | None = None  # pooled summary: how many repeats it pools
    telemetry: Telemetry | None = None  # CPU per process, GPUs (backends/telemetry.py)
    sessions: SessionStats | None = None  # multi-turn sessions: by turn index (compare/analysis/turns.py)
    steady_state: SteadyState | None = None  # time-bounded levels: the measured window, what was trimmed

    def server_histogram(self, key: str) -> ServerHistogram | None:
        """``server_metrics[key]`` (e.g. "server_queue_ms") typed, whatever version wrote it."""
        h = (self.server_metrics or {}).get(key)
        if not isinstance(h, dict) or not h.get("count") or not isinstance(h.get("mean"), (int, float)):
            return None
        q = h.get("quantiles")
        return ServerHistogram.model_validate({**h, "quantiles": q if isinstance(q, dict) else {}})


class RepeatRun(_Closed):
    """One engine start of a backend (runs with --repeats > 1)."""

    repeat: int
    status: str
    start_s: float | None = None
    levels: dict[str, LevelSummary] = Field(default_factory=dict)


# ---------------------------------------------------------------- a backend's section


class BackendResult(_Closed):
    status: str = "pending"
    error: str | None = None
    start_s: float | None = None
    capabilities: Capabilities | None = None  # one type with what a backend says (core/backend_info.py)
    describe: BackendDescription | None = None
    levels: dict[str, LevelSummary] = Field(default_factory=dict)
    repeats: list[RepeatRun] | None = None
    quant_verification: QuantVerification | None = None  # compare/quality/verify.py: loaded vs requested
    quality: Quality | None = None  # compare/quality/: parity against the float32 reference
    max_rate: MaxRate | None = None  # --find-max-rate: probes and answer (compare/tuning/max_rate.py)

    @property
    def forced_output_length(self) -> bool:
        return self.capabilities is None or self.capabilities.forced_output_length

    def repeat_summaries(self) -> list[tuple[int, dict[str, LevelSummary]]]:
        """(repeat number, {level: summary}); a run without repeats is one repeat."""
        if self.repeats:
            return [(r.repeat, r.levels) for r in self.repeats]
        return [(0, self.levels)]


# ---------------------------------------------------------------- length matching


class KRange(_Closed):
    min: int
    mean: float
    max: int


class MatchedSummary(_Measured):
    streamed_tokens: int
    matched_fraction: float | None = None
    repeats: dict[str, MatchedSummary] | None = None  # repeat number -> its matched summary


class MatchedLevel(_Closed):
    requests: int
    matched: int
    excluded_failed: int = 0
    excluded_empty: int = 0
    matched_tokens_per_backend: int
    k: KRange | None = None
    k_by_request: dict[str, int] = Field(default_factory=dict)
    backends: dict[str, MatchedSummary] = Field(default_factory=dict)


class LengthMatched(_Closed):
    reason: str | None = None
    definition: str
    levels: dict[str, MatchedLevel] = Field(default_factory=dict)


class PromptDiff(_Closed):
    """One backend's prompt lengths (as its engine counted them) against the other backends'."""

    compared: int  # requests that this and at least one other backend counted
    differing: int  # of those, where its count is not the one most backends counted (or none is)
    min_delta: int | None = None  # its count minus the majority's, where a majority exists
    max_delta: int | None = None


class PromptParity(_Closed):
    """Whether every backend's engine saw prompts of the same length (compare/analysis/prompt_parity.py)."""

    definition: str
    requests: int  # requests counted by at least two backends
    backends: dict[str, PromptDiff] = Field(default_factory=dict)  # those with a differing count only


# ---------------------------------------------------------------- the run header


class SpecInfo(_Open):
    """The ServingSpec as run (adapters/spec.py validates it; here only what readers use)."""

    model: str | None = None
    quantization: str = "none"
    tensor_parallel: int = 1


class WorkloadInfo(_Open):
    """The WorkloadSpec as run (compare/workload validates it; here only what readers use)."""

    name: str | None = None
    seed: int | None = None
    num_requests: int | None = None
    ignore_eos: bool = False


class LevelDef(_Closed):
    kind: str | None = None  # concurrency | rate | burst ...
    value: float | str | None = None
    label: str
    requests: int | None = None  # the workload's first N requests (--requests-per-stream); None: all
    arrival: str | None = None  # open loop: constant | gamma (absent: Poisson)
    burstiness: float | None = None  # gamma arrivals: the gaps' squared coefficient of variation
    duration_s: float | None = None  # time-bounded open loop: the sends inside this many seconds
    warmup_s: float | None = None  # time-bounded: requests due before this are trimmed (steady state)
    cooldown_s: float | None = None  # time-bounded: requests finished in the duration's last seconds are trimmed


class GpuInfo(_Closed):
    """One GPU as nvidia-smi names it (core/hardware.py ``nvidia_gpus``)."""

    name: str
    driver: str
    memory: str  # as nvidia-smi prints it, e.g. "143771 MiB"
    compute_cap: str  # e.g. "9.0"


class HardwareInfo(_Closed):
    hostname_hash: str | None = None
    os: str | None = None
    python: str | None = None
    cpu_model: str | None = None
    cpu_count: int | None = None
    cpu_affinity: int | None = None
    memory_bytes: int | None = None
    # the x86 instruction sets the run judged kernels by (core/hardware.isa_summary), and the level
    # LLM_COMPARE_CPU_ISA lowered them to when it was set (None: the CPU as it is)
    cpu_isa: str | None = None
    cpu_isa_assumed: str | None = None
    gpus: list[GpuInfo] = Field(default_factory=list)
    packages: dict[str, str] = Field(default_factory=dict)


class ClientInfo(_Closed):
    event_loop: str | None = None
    gc_frozen_during_levels: bool | None = None
    client_procs: int | str | None = None  # --client-procs as given: a count or "auto"


class RayCluster(_Open):
    """``compare run --ray``: the cluster as the run found it, where each cell (backend x repeat) ran,
    and the load shards' nodes and clock offsets per level (compare/running/ray_*.py, docs/ray.md)."""

    address: str
    ray_version: str | None = None
    nodes: list[RayNode] = Field(default_factory=list)
    cells: list[RayCell] = Field(default_factory=list)
    load_shards: list[LevelShards] = Field(default_factory=list)


class RunOwner(_Closed):
    """The process that writes a run (core/results/io.py): pid + start time + boot, so that a
    reused pid, or a reboot, is never taken for the owner of a run left "running"."""

    pid: int
    start_ticks: int | None = None  # /proc/PID/stat starttime: clock ticks after boot
    boot_id: str | None = None  # /proc/sys/kernel/random/boot_id
    host: str | None = None


class RunResults(_Open):
    """run.json. Extra top-level keys are provenance a harness adds (``extra_header``)."""

    schema_version: int = SCHEMA_VERSION
    run_id: str
    # running | complete | partial | failed | interrupted | killed (its owner died while it ran:
    # found and recorded by the next command that looked)
    status: str
    error: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    spec: SpecInfo = Field(default_factory=SpecInfo)
    backend_specs: dict[str, SpecInfo] = Field(default_factory=dict)
    workload: WorkloadInfo = Field(default_factory=WorkloadInfo)
    levels: list[LevelDef] = Field(default_factory=list)
    slo: list[SloLimit] = Field(default_factory=list)
    warmup_requests: int | None = Field(None, ge=0)
    repeats: int = Field(1, ge=1)
    hardware: HardwareInfo = Field(default_factory=HardwareInfo)
    client: ClientInfo | None = None
    gpu_hour_price: float | None = None
    backends: dict[str, BackendResult] = Field(default_factory=dict)
    length_matched: LengthMatched | None = None
    prompt_parity: PromptParity | None = None  # absent: not checked (one backend, or an older run)
    ray: RayCluster | None = None  # runs with --ray only
    owner: RunOwner | None = None  # the process writing the run (absent in runs written before it was kept)
    merged_from: list[MergedInput] | None = None  # `compare merge`: the runs pooled into this one

    @property
    def level_labels(self) -> list[str]:
        return [lv.label for lv in self.levels]

    def spec_for(self, backend: str) -> SpecInfo:
        return self.backend_specs.get(backend) or self.spec
