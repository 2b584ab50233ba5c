"""``compare run``'s options as one frozen pydantic model, :class:`RunOptions`; the spec and workload
options (:class:`SpecOptions`, :class:`WorkloadOptions`) are shared with ``tune``, ``plan`` and
``quant run``. Each option is declared once (compare/cli/model_args.py): default, constraint and
help; argparse is generated from these fields.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import create_model

from adapters.spec import SPEC_CLI_FIELDS, ServingSpec
from backends.topology.target import LB_POLICIES
from compare.cli.defaults import DEFAULT_LEVELS, default_backends
from compare.cli.model_args import CliModel, opt
from compare.cli.parser import run_id
from compare.workload.arrivals import ARRIVALS

SPEC = "serving spec (framework-neutral; see `compare plan`)"
WORKLOAD = "workload"
LOAD = "load and measurement"
QUALITY = "quality (vs the float32 transformers reference, scored after the engines stop)"
OUTPUT = "output"
TOPOLOGY = "topology (see backends/topology/backend.py)"
RAY = "scale-out on Ray (docs/ray.md)"
MAX_RATE = "max rate under the SLO"

# every ServingSpec field is a flag (``--max-num-seqs 32``), kept as typed: build_spec reads the
# text the way a spec file's value is read, and says which flag a refused value came from
_SPEC_FIELDS: dict[str, Any] = {
    "spec": (str | None, opt(None, "YAML file with ServingSpec fields", metavar="FILE", group=SPEC)),
    **{f"spec_{name}": (str | None, opt(None, ServingSpec.model_fields[name].description or None, metavar="V",
                                        flag="--" + name.replace("_", "-"), group=SPEC))
       for name in SPEC_CLI_FIELDS},
    "native": (list[str], opt(help="native option passed as is to one backend, e.g. "
                                   "vllm.scheduling_policy=priority", default_factory=list, append=True,
                              metavar="BACKEND.KEY=VALUE", group=SPEC)),
}
_SpecBase: Any = create_model("_SpecBase", __base__=CliModel, **_SPEC_FIELDS)


class SpecOptions(_SpecBase):  # type: ignore[misc,valid-type]
    """``--spec FILE``, one flag per ServingSpec field, ``--native BACKEND.KEY=VALUE``."""

    def flags(self) -> dict[str, str | None]:
        """The spec flags as typed (``--max-num-seqs 32`` -> ``{"max_num_seqs": "32"}``), None where unset."""
        return {name: getattr(self, f"spec_{name}") for name in SPEC_CLI_FIELDS}


class WorkloadOptions(CliModel):
    workload: str | None = opt(None, "YAML workload file (docs/workloads.md)", metavar="FILE", group=WORKLOAD)
    num_requests: int | None = opt(None, group=WORKLOAD)
    input_len: int | None = opt(None, "fixed input length in tokens", group=WORKLOAD)
    output_len: int | None = opt(None, "fixed output length in tokens", group=WORKLOAD)
    prompt_format: Literal["token_ids", "text", "chat"] | None = opt(None, group=WORKLOAD)
    sharegpt: str | None = opt(None, "ShareGPT JSON/JSONL dataset", metavar="FILE", group=WORKLOAD)
    dataset: str | None = opt(None, "your own prompts: JSONL, CSV or Parquet (text, chat messages or token ids, "
                              "optional output_len; docs/workloads.md)", metavar="FILE", group=WORKLOAD)
    dataset_columns: str | None = opt(None, "read the prompt/messages/token_ids/output_len fields from these "
                                      "columns", metavar="FIELD=COLUMN,...", group=WORKLOAD)
    trace: str | None = opt(None, "replay a Mooncake JSONL / Azure / BurstGPT CSV trace at its own clock (open "
                            "loop; replaces --concurrency/--rate)", metavar="FILE", group=WORKLOAD)
    trace_format: Literal["mooncake", "azure", "burstgpt"] | None = opt(
        None, "the trace's format (default: detected from its content)", group=WORKLOAD)
    trace_speedup: float = opt(1.0, "send the trace this many times faster", group=WORKLOAD)
    trace_window: str | None = opt(None, "replay only these seconds of the trace", metavar="START:END",
                                   group=WORKLOAD)
    trace_max_requests: int | None = opt(None, "replay at most the first N requests", metavar="N", group=WORKLOAD,
                                         ge=1, says="{flag} {value}: must be at least 1")
    workload_seed: int | None = opt(None, "seed of the request list and arrivals", group=WORKLOAD, ge=0,
                                    says="{flag} {value}: a seed is a whole number >= 0")

    def trace_options(self) -> dict[str, Any] | None:
        """``--trace FILE`` and its options (compare/workload/traces.py), None without it."""
        if not self.trace:
            return None
        return {"path": self.trace, "fmt": self.trace_format, "speedup": self.trace_speedup,
                "window": self.trace_window, "cap": self.trace_max_requests}


class VerdictOptions(CliModel):
    """How the verdict prices and judges the run (``compare run`` and ``compare report``)."""

    gpu_hour_price: float | None = opt(None, "price of one accelerator-hour: adds cost per million output tokens "
                                       "to the verdict (`compare report`: default the run's own)", group=OUTPUT, gt=0,
                                       fix="price of one accelerator-hour, e.g. 2.5")
    margin: float | None = opt(None, "equivalence / non-inferiority margin for the verdict, e.g. 0.05",
                               group=OUTPUT, gt=0, lt=1,
                               says="{flag} is a fraction between 0 and 1, e.g. 0.05 for 5%; got {value}")


class TopologyOptions(CliModel):
    """``--topology``, ``--lb``, ``--kill-replica-after``, ``--kill-level`` (backends/topology/target.py)."""

    topology: str | None = opt(None, "run each backend as one TP=N engine and/or N replicas (each its own devices)",
                               metavar="tp=N,replicas=N", group=TOPOLOGY)
    lb: Literal[tuple(sorted(LB_POLICIES))] = opt("lor", "replica load balancing (default lor)",  # type: ignore[valid-type]
                                                  group=TOPOLOGY)
    kill_replica_after: str | None = opt(None, "SIGKILL the last replica S seconds, or N routed requests (e.g. 16r), "
                                         "into a load level (failure cost)", metavar="S|Nr", group=TOPOLOGY)
    kill_level: str | None = opt(None, "the level of --kill-replica-after, e.g. c8 (default: the first)",
                                 metavar="LABEL", group=TOPOLOGY)


class RayOptions(CliModel):
    """``--ray`` and its load shards (compare/running/ray_cells.py)."""

    ray: str | None = opt(None, "run each backend x repeat as a Ray task on that cluster (auto: the one `ray start` "
                          "left on this machine); results land here as without Ray", metavar="auto|HOST:PORT",
                          group=RAY)
    ray_load_shards: int = opt(0, "already running endpoints: send each level from N load-generator actors (>= 2)",
                               metavar="N", group=RAY)
    ray_max_clock_error_ms: float = opt(5.0, "refuse a load shard whose clock offset to this host is known less "
                                        "precisely (default 5 ms; the offset itself is measured and corrected)",
                                        metavar="MS", group=RAY, gt=0)


class SearchOptions(CliModel):
    """``--find-max-rate`` and its search (compare/cli/max_rate.py)."""

    find_max_rate: bool = opt(False, "after the levels, search each backend's highest Poisson rate (req/s) that "
                              "still meets --slo (bracket, then bisect; each probe sends the whole request list)",
                              group=MAX_RATE)
    max_rate_start: float = opt(1.0, "first rate probed (default 1); doubled while the SLO holds, halved (down to "
                                "start/8) while it does not", metavar="REQ_S", group=MAX_RATE, gt=0,
                                says="{flag} must be a finite rate > 0 req/s, got {value}")
    max_rate_probes: int = opt(8, "probes per engine start (default 8); fewer probes, a wider met/missed interval",
                               metavar="N", group=MAX_RATE, ge=1)
    max_rate_tol: float = opt(0.15, "stop bisecting when missed/met <= 1+F (default 0.15)", metavar="F",
                              group=MAX_RATE, gt=0)


class RunOptions(SpecOptions, WorkloadOptions, VerdictOptions, TopologyOptions, RayOptions, SearchOptions):
    """Every ``compare run`` option, typed and range-checked; compare/cli/request.py turns it into a RunRequest."""

    backends: str = opt(help="comma-separated backends (default %(default)s); see `compare backends`",
                        default_factory=default_backends)
    concurrency: str | None = opt(None, f"closed-loop levels, e.g. 1,4,16 (default {DEFAULT_LEVELS} when no --rate "
                                  "is given)", group=LOAD)
    rate: str | None = opt(None, "open-loop rates in req/s, e.g. 2,8,inf (gaps per --arrival)", group=LOAD)
    arrival: Literal[ARRIVALS] = opt(  # type: ignore[valid-type]
        "poisson", "how a --rate level's gaps are drawn (seeded, the same on every backend): poisson (default), "
        "constant (exactly 1/rate) or gamma (bursty; see --burstiness)", metavar="|".join(ARRIVALS), group=LOAD,
        says="{flag} '{value}' is unknown; use one of " + ", ".join(ARRIVALS))
    burstiness: float = opt(1.0, "--arrival gamma: the gaps' squared coefficient of variation (1 = Poisson-like, "
                            ">1 clumps of sends with quiet spells, <1 smoother); default 1", group=LOAD)
    duration: float | None = opt(None, "time-bounded --rate levels: each sends the requests whose seeded send time "
                                 "falls in the first SECONDS (the same on every backend); --num-requests must cover "
                                 "them", metavar="SECONDS", group=LOAD)
    warmup_seconds: float | None = opt(None, "--duration levels: requests due in the first S seconds are kept in "
                                       "requests.jsonl but left out of the level's statistics (default: a tenth of "
                                       "--duration; 0: none)", metavar="S", group=LOAD)
    cooldown_seconds: float | None = opt(None, "--duration levels: the measured window ends S seconds before the "
                                         "sends stop; requests finished after it are kept but not counted (default: "
                                         "a tenth of --duration; 0: none)", metavar="S", group=LOAD)
    requests_per_stream: int | None = opt(
        None, "each closed-loop level at concurrency C sends the workload's first min(N, K*C) requests (the same "
        "prefix on every backend), so single-stream levels stay short while saturated ones still get K waves; "
        "default: every level sends all N", metavar="K", group=LOAD, ge=1,
        says="{flag} {value}: each stream sends at least one request, e.g. --requests-per-stream 4")
    slo: str | None = opt(None, "e.g. ttft_p95=2s,tpot_p95=100ms (goodput counts requests meeting each limit)",
                          group=LOAD)
    require_slo: bool = opt(False, "a deployment guard (needs --slo): exit 1 unless every backend (and variant) "
                            "meets every SLO term at EVERY measured load level with no failed request, one line per "
                            "miss; measure only the loads the deployment must sustain (results are kept either way)",
                            group=LOAD)
    vary: list[str] | None = opt(None, "run each backend once per value of a spec field, each as its own column, "
                                 "e.g. --vary block_size=16,32 (vllm[block_size=16], vllm[block_size=32]); repeat "
                                 "the flag for a grid; 'default' = the framework's own default",
                                 metavar="FIELD=V1,V2", append=True, group=LOAD)
    warmup: int = opt(2, "warm-up requests per backend (not measured)", group=LOAD, ge=0)
    timeout: float = opt(600.0, "per-request timeout in seconds", group=LOAD, gt=0, fix="seconds")
    max_errors: int | None = opt(None, "stop a backend's level after this many failed requests (default: half)",
                                 group=LOAD, ge=0)
    replay: str | None = opt(None, "replay the exact requests of an earlier run", metavar="RESULTS_DIR", group=LOAD)
    client_procs: str = opt("auto", "load-generator processes per level for HTTP backends (one shared start "
                            "instant, one clock, records merged). auto: two free cores each after 4 for an engine "
                            "on this machine (1 on small machines and for in-process backends), one per 16 "
                            "closed-loop streams; N > 1 is refused for in-process backends", metavar="N|auto",
                            group=LOAD)
    repeats: int = opt(1, "runs per backend, each with a fresh engine, interleaved A B A B (>= 2 gives confidence "
                       "intervals; 3 recommended for baselines)", group=LOAD, ge=1,
                       fix="2 or more give confidence intervals")
    quality: Literal["auto", "on", "off"] = opt(
        "auto", "auto (default): measure reduced-precision and quantized runs (bf16/fp16, a quantization, a "
        "quantized checkpoint); on: every backend; off: speed only", group=QUALITY)
    quality_device: Literal["auto", "cpu", "cuda"] = opt(
        "auto", "where the reference runs once every engine has stopped (auto: the GPU when its free memory holds "
        "the float32 model, else the CPU when RAM does, else skipped with why)", group=QUALITY)
    quality_reference: str | None = opt(None, "reference model directory (default: a quantized checkpoint's "
                                        "recorded source, else the model)", metavar="DIR", group=QUALITY)
    quality_prompts: int = opt(8, "probe requests per backend (default 8)", metavar="N", group=QUALITY, ge=1,
                               says="{flag} {value}: give at least 1 (or --quality off)")
    out: Path = opt(Path("results"), "results root (default ./results)", group=OUTPUT)
    run_id: str | None = opt(None, "results subdirectory name: letters, digits, ._- (default: timestamp)",
                             parse=run_id, group=OUTPUT)
    format: Literal["table", "json", "md", "html"] = opt(
        "table", "table: console; json: run.json + verdict on stdout; md: Markdown report on stdout; html: "
        "RESULTS/report.html (all rendered from the results files)", group=OUTPUT)
    quiet: bool = opt(False, "print only the verdict and the results path", short="-q", group=OUTPUT)
    verbose: bool = opt(False, "stream the engines' own logs to the console (always kept in RESULTS/logs/)",
                        short="-v", group=OUTPUT)
    tuned: str | None = opt(None, "run each backend at its best config from `compare tune` (TUNE_DIR/tune.json)",
                            metavar="TUNE_DIR")


# --help's order of the sections; options outside a section come first
RUN_GROUPS = (SPEC, WORKLOAD, LOAD, QUALITY, OUTPUT, TOPOLOGY, RAY, MAX_RATE)
