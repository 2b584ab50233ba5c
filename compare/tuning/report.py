"""What a tune produces: tune.json (every trial, best, default, gain, Pareto frontier), the Pareto
plot, and the tuned specs ``compare run --tuned`` starts each backend with."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from adapters.spec import ServingSpec
from backends.topology.target import KINDS, Topology
from core.errors import UserError
from compare.tuning.search import best_of, pareto_frontier
from compare.tuning.space import apply_config, space_for
from core.results.tune import ProbeRow, Trial, TunedBackend, TuneGain


def backend_report(backend: str, trials: list[dict[str, Any]], default_label: str = "default") -> TunedBackend:
    """tune.json's entry of one backend from its search's trials (compare/tuning/search.py keeps
    them as the JSON its trial cache holds)."""
    best = best_of(trials)
    default = next((t for t in trials if t["label"] == default_label), None)
    probes = [{**p, "label": t["label"]} for t in trials for p in t.get("probes", [])]
    best_t = Trial.model_validate(best) if best is not None else None
    default_t = Trial.model_validate(default) if default is not None else None
    return TunedBackend(
        backend=backend, trials=[Trial.model_validate(t) for t in trials], best=best_t, default=default_t,
        frontier={lat: [ProbeRow.model_validate(p) for p in pareto_frontier(probes, lat)]
                  for lat in ("ttft_p95_ms", "tpot_p95_ms")},
        engine_starts=sum(1 for t in trials if t["status"] not in ("rejected", "same as default") and not t.get("cached")),
        cache_hits=sum(1 for t in trials if t.get("cached")),
        gain=gain(best_t, default_t))


def gain(best: Trial | None, default: Trial | None) -> TuneGain:
    """Tuned vs default goodput, and whether the difference is larger than the noise."""
    if best is None:
        return TuneGain(verdict="no config met the SLO")
    if default is None or not default.feasible:
        return TuneGain(verdict="the default config does not meet the SLO at any load tried; the tuned one does",
                        ratio=None)
    if best.label == default.label:
        return TuneGain(ratio=1.0, verdict="the default config is already the best one found for this workload")
    b, d = best.goodput_req_s, default.goodput_req_s
    ratio = float(best.goodput or 0.0) / float(default.goodput or 1.0)
    beyond = b is not None and d is not None and b.lo > d.hi and b.n >= 2 and d.n >= 2
    verdict = (f"tuned goodput {ratio:.2f}x the default, beyond the 95% CIs" if beyond else
               f"tuned max load {ratio:.2f}x the default, but the measured goodput CIs overlap: "
               f"the default is already optimal within noise for this workload")
    return TuneGain(ratio=ratio, beyond_ci=beyond, verdict=verdict)


def plot_pareto(reports: list[TunedBackend], slo_limits: dict[str, float], path: Path) -> None:
    """Throughput vs TTFT p95 and vs TPOT p95, every probe of every trial; frontier as a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, lat, title in ((axes[0], "ttft_p95_ms", "TTFT p95"), (axes[1], "tpot_p95_ms", "TPOT p95")):
        for i, rep in enumerate(reports):
            color = f"C{i}"
            pts = [p for t in rep.trials for p in t.probes if getattr(p, lat) is not None]
            ax.scatter([p.output_tok_s for p in pts], [getattr(p, lat) for p in pts], s=12, alpha=0.35,
                       color=color, label=f"{rep.backend}: all probes")
            front = rep.frontier[lat]
            ax.plot([p.output_tok_s for p in front], [getattr(p, lat) for p in front], "-o", color=color,
                    ms=4, label=f"{rep.backend}: Pareto frontier")
        key = lat.replace("_ms", "")
        if key in slo_limits:
            ax.axhline(slo_limits[key], ls="--", color="red", lw=1, label=f"SLO {key} {slo_limits[key]:g} ms")
        ax.set_xlabel("output tokens/s")
        ax.set_ylabel(f"{title} (ms)")
        ax.set_yscale("log")
        ax.set_title(f"throughput vs {title}")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)  # atomic: a reader never sees half a PNG


def tuned_specs(tune_dir: str, backends: list[str | Topology], base: ServingSpec) -> dict[str, ServingSpec]:
    """``compare run --tuned DIR``: each backend's best config from a tune, over the run's spec
    (keyed by display name; a topology runs the tuned config of its inner backend)."""
    path = Path(tune_dir) / "tune.json" if Path(tune_dir).is_dir() else Path(tune_dir)
    if not path.exists() and not path.is_symlink():  # (a symlink loop: the reader below says so)
        raise UserError(f"--tuned {tune_dir}: no tune.json there; pass a directory written by `compare tune`")
    from core.fsutil import read_user_json

    fix = "pass a directory written by `compare tune`"
    data = read_user_json(path, "--tuned file", fix)
    from pydantic import ValidationError

    from core.results.migrate import first_problem
    from core.results.tune import TuneResults

    try:
        tune = TuneResults.model_validate(data)
    except ValidationError as e:
        raise UserError(f"--tuned file {path} is not a tune.json written by `compare tune` "
                        f"({first_problem(e, TuneResults)}); {fix}") from None
    best = {r.backend: r.best for r in tune.backends}
    out = {}
    for target in backends:
        full = str(target)
        name = _tuned_name(target)
        if name not in best:
            raise UserError(f"--tuned {tune_dir}: backend {name} was not tuned there (tuned: "
                            f"{', '.join(best) or 'none'}); run `compare tune --backend {name}` first")
        if best[name] is None:
            raise UserError(f"--tuned {tune_dir}: no config of {name} met the SLO in that tune; "
                            f"relax the SLO and tune again")
        space = space_for(name)
        cfg = best[name].config
        unknown = sorted(k for k in cfg if k not in {knob.name for knob in space.knobs})
        if unknown:  # (a tune.json edited by hand, or of another version: a KeyError traceback)
            raise UserError(f"--tuned file {path}: the best config of {name} sets {unknown[0]!r}, not a knob of "
                            f"{name} (knobs: {', '.join(k.name for k in space.knobs)}); {fix}")
        try:
            out[full] = apply_config(space, base, cfg)
        except ValidationError as e:  # a value the spec refuses ("many", -4): was a traceback
            raise UserError(f"--tuned file {path}: the best config of {name} does not make a valid spec "
                            f"({first_problem(e, ServingSpec)}); {fix}") from None
    return out


def _tuned_name(target: str | Topology) -> str:
    """``replicas@2*vllm:lb=lor`` and ``tp@2*vllm`` run the tuned config of ``vllm``."""
    if isinstance(target, str) and target.partition("@")[0].strip() in KINDS:
        target = Topology.from_name(target)
    return target.inner if isinstance(target, Topology) else target
