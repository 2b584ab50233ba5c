"""Roofline report from a validation work directory (benchmarks/gpu/validate.py).

Reads microbench.json (the measured ceilings), offline.json (LLM.generate), runs/*/run.json +
requests.jsonl (`compare run`), phases.json (GPU memory), the model's config.json; writes
report.json and report.md beside them. Runs anywhere (no GPU, no vLLM):
  python benchmarks/gpu/report.py WORK_DIR

Floors (compare/analysis/roofline.py), each measured point given as floor / measured:
- single-stream decode per token vs one decode step at the mean context length;
- TPOT at a load level vs one decode step with B = the level's mean number of requests in flight
  (sum of request durations / wall) at the mean context;
- TTFT at concurrency 1 vs the prefill of that request's prompt (+ its first token);
- burst/offline throughput vs the whole workload's work: its FLOPs, and at least max(output
  length) decode steps each streaming the weights plus every KV byte read.
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from core.fsutil import write_atomic, write_json_atomic  # noqa: E402
from compare.analysis.metrics import e2e_ns  # noqa: E402
from core.results import iter_records  # noqa: E402
from compare.analysis.roofline import Ceilings, ModelShape, Work, dtype_bytes  # noqa: E402

TOLERANCE = 0.02  # target: in-process throughput within 2% of LLM.generate's


def _load(p: Path) -> Any:
    return json.loads(p.read_text()) if p.exists() else None


def _dtype(spec_text: str) -> str:
    import yaml

    d = (yaml.safe_load(spec_text) or {}).get("dtype", "bfloat16")
    return "bfloat16" if d == "auto" else d


def _work_totals(shape: ModelShape, prompts: list[int], outs: list[int], wb: int, kb: int) -> Work:
    """Lower bound of the whole workload's work, however the engine batches it."""
    flops = shape.prefill(prompts, wb, kb).flops
    f0 = shape.decode_step([0], wb, kb).flops  # one token's matrix work, no context
    per_ctx = shape.decode_step([1], wb, kb).flops - f0  # attention FLOP per context token
    ctx_sum = 0
    for p, o in zip(prompts, outs):
        steps = max(o - 1, 0)  # the first output token comes from the prefill step
        ctx = steps * p + steps * (steps + 1) // 2  # step j attends over p + j tokens
        ctx_sum += ctx
        flops += steps * f0
    flops += per_ctx * ctx_sum
    kv_read = ctx_sum * shape.kv_bytes_per_token(kb)
    weights = shape.decode_step([1], wb, kb).detail["weight_bytes"] * max(max(outs) - 1, 1)
    return Work(bytes=weights + kv_read, flops=flops, detail={"weight_bytes": weights, "kv_read_bytes": kv_read})


def _level_points(shape, ceil, run_dir: Path, run: dict, wb: int, kb: int) -> dict[str, Any]:
    recs: dict[str, list] = {}
    for r in iter_records(run_dir):
        recs.setdefault(r.level, []).append(r)
    out = {}
    for bname, b in run.get("backends", {}).items():
        for label, s in b.get("levels", {}).items():
            rs = [r for r in recs.get(label, []) if r.ok and r.backend == bname]
            if not rs or not s.get("tpot_ms"):
                continue
            inflight = sum(e2e_ns(r) for r in rs) / 1e9 / s["wall_s"]
            p_mean = statistics.fmean(r.prompt_tokens or 0 for r in rs)
            o_mean = statistics.fmean(r.output_tokens for r in rs)
            b_eff = max(1, round(inflight))
            step = shape.decode_step([round(p_mean + o_mean / 2)] * b_eff, wb, kb)
            pt = {"label": label, "requests": s["ok"], "output_tok_s": s["output_tok_s"],
                  "ttft_p50_ms": s["ttft_ms"]["p50"], "ttft_p99_ms": s["ttft_ms"]["p99"],
                  "tpot_p50_ms": s["tpot_ms"]["p50"], "tpot_p99_ms": s["tpot_ms"]["p99"],
                  "itl_p50_ms": (s.get("itl_ms") or {}).get("p50"), "mean_in_flight": inflight,
                  "tpot_vs_decode_floor": ceil.point(step, s["tpot_ms"]["p50"] / 1e3)}
            sm = s.get("server_metrics") or {}
            for k in ("server_ttft_ms", "server_itl_ms", "server_queue_ms", "server_prefill_ms"):
                if isinstance(sm.get(k), dict):
                    pt[k + "_mean"] = sm[k].get("mean")
            if label == "c1":  # prefill floor per request: TTFT is one prefill step + sampling
                fr = [ceil.floor_s(shape.prefill([r.prompt_tokens], wb, kb)) / ((r.event_times_ns[0] - r.t_sent_ns) / 1e9)
                      for r in rs if r.prompt_tokens and r.event_times_ns]
                pt["ttft_fraction_of_prefill_floor_median"] = statistics.median(fr) if fr else None
            if label == "burst":
                prompts = [r.prompt_tokens or 1 for r in rs]
                outs = [r.output_tokens for r in rs]
                pt["throughput_vs_floor"] = ceil.point(_work_totals(shape, prompts, outs, wb, kb), s["wall_s"])
            # the original phases keep their short keys; later phases (e.g. inproc-burst) are prefixed
            prefix = "" if run_dir.name in ("inproc", "server", "inproc-c1", "server-c1") else f"{run_dir.name}:"
            out[f"{prefix}{bname}/{label}"] = pt
    return out


def _burst_repeats(work: Path, ref: float, only: str | None = None, first: float | None = None) -> dict[str, Any]:
    """The 2% question, per engine start: each repeat of the burst level vs LLM.generate's median,
    and vs LLM.generate's FIRST call (``first``): like each of our repeats, the first full-size
    batch of a fresh engine after the same two-request warm-up. LLM.generate's later calls in the
    same engine run ~3-4% faster (in every H200 run, docs/benchmarks.md), a warm-engine effect
    that a restart-per-repeat measurement never gets.

    Client-side throughput (first send to last token seen) and the engine-side one (vLLM's own
    engine-core stamps, compare/analysis/metrics.py ``engine_side``): the gap between them is delivery.
    """
    out: dict[str, Any] = {}
    for run_json in sorted(work.glob("runs/inproc-burst*/run.json")):
        if (only is None) == run_json.parent.name.endswith("-nostats") or (only and run_json.parent.name != only):
            continue
        run = json.loads(run_json.read_text())
        loop = (run.get("client") or {}).get("event_loop")
        for bname, b in run.get("backends", {}).items():
            reps = b.get("repeats") or [{"levels": b.get("levels", {})}]
            rows = []
            for r in reps:
                lv = (r.get("levels") or {}).get("burst")
                if not lv:
                    continue
                rows.append({"output_tok_s": lv["output_tok_s"], "ratio": lv["output_tok_s"] / ref,
                             "ratio_first": (lv["output_tok_s"] / first) if first else None,
                             "engine_output_tok_s": lv.get("engine_output_tok_s"),
                             "engine_ratio": (lv["engine_output_tok_s"] / ref) if lv.get("engine_output_tok_s") else None,
                             "delivery_lag_ms_p50": (lv.get("delivery_lag_ms") or {}).get("p50"),
                             "delivery_lag_ms_max": (lv.get("delivery_lag_ms") or {}).get("max"),
                             "loop_lag_ms_max": (lv.get("loop_lag_ms") or {}).get("max")})
            if rows:
                med = statistics.median(x["ratio"] for x in rows)
                medf = statistics.median(x["ratio_first"] for x in rows) if first else None
                out[f"{run_json.parent.name}/{bname}"] = {
                    "event_loop": loop, "repeats": rows, "median_ratio": med,
                    "within_2pct": abs(med - 1) <= TOLERANCE, "median_ratio_first": medf,
                    "within_2pct_first": medf is not None and abs(medf - 1) <= TOLERANCE}
    return out


def build(work: Path) -> dict[str, Any]:
    mb, off, phases = _load(work / "microbench.json"), _load(work / "offline.json"), _load(work / "phases.json")
    rep: dict[str, Any] = {"env": _load(work / "env.json"), "microbench": mb, "phases": phases}
    cfg = _load(work / "model" / "config.json") or _load(Path(__file__).with_name("qwen2.5-7b-config.json"))
    shape = ModelShape.from_hf_config(cfg)
    dt = _dtype(phases["spec"]) if phases else "bfloat16"
    wb = kb = dtype_bytes(dt)
    pc = shape.param_counts()
    rep["model"] = {"params": pc, "dtype": dt, "weight_bytes_streamed_per_step": shape.decode_step([1], wb, kb).detail["weight_bytes"],
                    "kv_bytes_per_token": shape.kv_bytes_per_token(kb)}
    if not mb:
        return rep
    ceil = Ceilings(bandwidth=mb["copy"]["bandwidth_bytes_s"], flops=mb["matmul"]["flops_s"])
    rep["ceilings"] = {"bandwidth_TB_s": ceil.bandwidth / 1e12, "matmul_TFLOP_s": ceil.flops / 1e12}
    if off and off.get("single_stream"):
        ss = off["single_stream"]
        step = shape.decode_step([ss["prompt_tokens"] + ss["decode_tokens"] // 2], wb, kb)
        rep["single_stream_decode"] = ceil.point(step, ss["decode_s_per_token_median"])
    levels: dict[str, Any] = {}
    for run_json in sorted(work.glob("runs/*/run.json")):
        levels.update(_level_points(shape, ceil, run_json.parent, json.loads(run_json.read_text()), wb, kb))
    rep["levels"] = levels
    for tag, o in (("matched", off), ("default", _load(work / "offline-default.json"))):
        if not (o and o.get("throughput")):
            continue
        ref = o["throughput"]["median_output_tok_s"]
        cmp_ = {"offline_llm_generate_tok_s": ref, "offline_runs_tok_s": [r["output_tok_s"] for r in o["throughput"]["runs"]],
                "engine_args": o.get("engine_args")}
        for key in ("vllm/burst", "vllm-server/burst"):
            if key in levels:
                ratio = levels[key]["output_tok_s"] / ref
                cmp_[key] = {"output_tok_s": levels[key]["output_tok_s"], "ratio": ratio,
                             "within_2pct": abs(ratio - 1) <= TOLERANCE}
        rep["throughput_vs_offline" if tag == "matched" else "throughput_vs_offline_default"] = cmp_
        if tag == "matched":
            rep["burst_repeats_vs_offline"] = _burst_repeats(work, ref, first=o["throughput"]["runs"][0]["output_tok_s"])
    nost = _load(work / "offline-nostats.json")
    if nost and nost.get("throughput"):  # stats off on both sides
        ref = nost["throughput"]["median_output_tok_s"]
        rep["nostats_offline_tok_s"] = {"median": ref, "runs": [r["output_tok_s"] for r in nost["throughput"]["runs"]]}
        rep["burst_repeats_vs_offline_nostats"] = _burst_repeats(work, ref, "inproc-burst-nostats",
                                                                 first=nost["throughput"]["runs"][0]["output_tok_s"])
    return rep


def _f(x: Any, nd: int = 2) -> str:
    return "—" if x is None else (f"{x:,.{nd}f}" if isinstance(x, float) else str(x))


def markdown(rep: dict[str, Any]) -> str:
    L = ["# GPU validation report", ""]
    env = rep.get("env") or {}
    L += [f"- device: {env.get('nvidia_smi_L')}", f"- packages: {env.get('packages')}",
          f"- python {env.get('python')}, {env.get('platform')}"]
    m = rep["model"]
    L += [f"- model: {m['params']['total'] / 1e9:.3f} B params, {m['dtype']}, weights streamed per decode step "
          f"{m['weight_bytes_streamed_per_step'] / 1e9:.2f} GB, KV {m['kv_bytes_per_token']} B/token"]
    if "ceilings" in rep:
        c = rep["ceilings"]
        L += [f"- measured ceilings: copy {c['bandwidth_TB_s']:.3f} TB/s (read+write), matmul {c['matmul_TFLOP_s']:.1f} TFLOP/s", ""]
    if "single_stream_decode" in rep:
        s = rep["single_stream_decode"]
        L += [f"**Single-stream decode**: {s['measured_ms']:.3f} ms/token = {s['multiple_of_floor']:.2f}x the "
              f"bandwidth floor ({s['floor_ms']:.3f} ms; {s['fraction_of_roofline']:.0%} of roofline)", ""]
    for key, what in (("throughput_vs_offline", "same engine config as the in-process backend"),
                      ("throughput_vs_offline_default", "LLM's default config")):
        t = rep.get(key)
        if not t:
            continue
        runs = ", ".join(f"{x:,.0f}" for x in t["offline_runs_tok_s"])
        L += [f"| throughput (burst, same requests) vs LLM.generate, {what} | output tok/s | ratio |", "|---|---|---|",
              f"| vLLM LLM.generate (median of {runs}) | {t['offline_llm_generate_tok_s']:,.0f} | 1.000 |"]
        for k in ("vllm/burst", "vllm-server/burst"):
            if k in t:
                L.append(f"| compare run {k} | {t[k]['output_tok_s']:,.0f} | {t[k]['ratio']:.3f} "
                         f"({'within' if t[k]['within_2pct'] else 'NOT within'} 2%) |")
        L.append("")
    br = {**(rep.get("burst_repeats_vs_offline") or {}), **(rep.get("burst_repeats_vs_offline_nostats") or {})}
    if rep.get("nostats_offline_tok_s"):
        n = rep["nostats_offline_tok_s"]
        L += [f"LLM.generate with stats off (the -nostats rows' yardstick): median {n['median']:,.0f} of "
              + ", ".join(f"{x:,.0f}" for x in n["runs"]) + " tok/s", ""]
    if br:
        L += ["| burst level, one engine start each | event loop | out tok/s (client) | vs LLM.generate median | "
              "vs LLM.generate first call | engine-side tok/s | engine-side vs median | delivery lag p50 / max ms | "
              "loop lag max ms |", "|---|---|---|---|---|---|---|---|---|"]
        for k, v in br.items():
            for i, x in enumerate(v["repeats"]):
                L.append(f"| {k} #{i + 1} | {v['event_loop']} | {x['output_tok_s']:,.0f} | {x['ratio']:.3f} | "
                         f"{_f(x.get('ratio_first'), 3)} | {_f(x['engine_output_tok_s'], 0)} | {_f(x['engine_ratio'], 3)} | "
                         f"{_f(x['delivery_lag_ms_p50'], 1)} / {_f(x['delivery_lag_ms_max'], 1)} | {_f(x['loop_lag_ms_max'], 1)} |")
            first = (f"**{v['median_ratio_first']:.3f}** ({'within' if v['within_2pct_first'] else 'NOT within'} 2%)"
                     if v.get("median_ratio_first") is not None else "—")
            L.append(f"| {k} median | | | **{v['median_ratio']:.3f}** ({'within' if v['within_2pct'] else 'NOT within'} 2%) "
                     f"| {first} | | | | |")
        L.append("")
    if rep.get("levels"):
        L += ["| backend/level | ok | out tok/s | TTFT p50 / p99 ms | TPOT p50 / p99 ms | in flight | "
              "decode floor ms | TPOT floor/measured |", "|---|---|---|---|---|---|---|---|"]
        for k, p in rep["levels"].items():
            fl = p["tpot_vs_decode_floor"]
            L.append(f"| {k} | {p['requests']} | {p['output_tok_s']:,.0f} | {_f(p['ttft_p50_ms'], 1)} / {_f(p['ttft_p99_ms'], 1)} | "
                     f"{_f(p['tpot_p50_ms'])} / {_f(p['tpot_p99_ms'])} | {p['mean_in_flight']:.1f} | "
                     f"{fl['floor_ms']:.2f} | {fl['fraction_of_roofline']:.0%} |")
        L.append("")
        for k, p in rep["levels"].items():
            if p.get("ttft_fraction_of_prefill_floor_median") is not None:
                L.append(f"- {k}: TTFT is {p['ttft_fraction_of_prefill_floor_median']:.0%} efficient vs the prefill floor (median)")
            if p.get("throughput_vs_floor"):
                tf = p["throughput_vs_floor"]
                L.append(f"- {k}: workload wall {tf['measured_ms'] / 1e3:.2f} s vs floor {tf['floor_ms'] / 1e3:.2f} s "
                         f"({tf['bound']}-bound) = {tf['fraction_of_roofline']:.0%} of roofline")
    ph = (rep.get("phases") or {}).get("phases", {})
    if ph:
        L += ["", "| phase | rc | wall s | peak GPU memory MiB |", "|---|---|---|---|"]
        for n, r in ph.items():
            L.append(f"| {n} | {r.get('rc')} | {r.get('wall_s', '—')} | {_f((r.get('gpu') or {}).get('max_used_mib'), 0)} |")
    return "\n".join(L) + "\n"


if __name__ == "__main__":
    w = Path(sys.argv[1])
    r = build(w)
    write_json_atomic(w / "report.json", r)
    write_atomic(w / "report.md", markdown(r))
    print(markdown(r))
