"""vLLM's own offline ``LLM.generate`` on the exact request list ``compare run`` sends.

The yardstick for our in-process measurement: same engine arguments (built by the same adapter,
``adapters.vllm.vllm_engine_args``), the same requests (``compare.workload.build.build_requests`` on the
same workload file), the same sampling parameters, all submitted at once like our ``rate=inf``
(burst) level. Throughput = output tokens / wall time of the ``generate`` call, repeated.

Then single-stream decode: one request generating 1 token vs 1+K tokens; the difference / K is
the per-token decode time with nothing else in the batch (compared with the bandwidth floor).

Usage: python benchmarks/gpu/offline.py --spec S.yaml --model DIR --workload W.yaml \
           [--num-requests N] --out OUT.json [--repeats 3] [--decode-tokens 128]
Results are rewritten after every step, so a run cut off keeps what it measured.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # repo root: adapters/, compare/

from benchmarks.gpu.common import engine_info, load_spec, load_workload, set_engine_env  # noqa: E402
from core.fsutil import write_json_atomic  # noqa: E402


def _sampling(r, SamplingParams):
    # the fields backends/vllm/inproc.py sets, minus streaming (offline returns final outputs)
    return SamplingParams(max_tokens=r.max_tokens, temperature=r.temperature, top_p=r.top_p,
                          ignore_eos=r.ignore_eos, seed=r.seed, logprobs=r.logprobs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spec", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--workload", required=True)
    ap.add_argument("--num-requests", type=int)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--decode-tokens", type=int, default=128)
    ap.add_argument("--log-stats", choices=["on", "default"], default="on",
                    help="on: disable_log_stats=False, as backends/vllm/inproc.py starts AsyncLLM (the "
                         "matched config); default: LLM's own default (stats off)")
    ap.add_argument("--skip-single-stream", action="store_true")
    ap.add_argument("--match-run", type=Path,
                    help="run.json of `compare run --backends vllm`: pin the scheduler limits that engine "
                         "resolved (LLM picks its own defaults by usage context: 16384 tokens per step on an "
                         "H200 where `vllm serve` and our backend get 8192)")
    a = ap.parse_args(argv)
    set_engine_env()

    from adapters.vllm import vllm_plan
    from backends.models.dummy import engine_args
    from backends.models.probe import probe
    from compare.workload.build import build_requests

    spec = load_spec(a.spec, a.model)
    workload = load_workload(a.workload, a.num_requests)
    reqs = build_requests(workload)
    args = engine_args(vllm_plan(spec, probe(spec.model)))  # same plan as the vllm backend
    if a.log_stats == "on":
        args.setdefault("disable_log_stats", False)
    if a.match_run:
        run = json.loads(a.match_run.read_text())
        resolved = run["backends"]["vllm"]["describe"]["native_config"]["resolved"]
        for k in ("max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill"):
            if resolved.get(k) is not None:
                args.setdefault(k, resolved[k])
    res: dict = {"phase": "offline", "engine_args": args, "workload": workload.model_dump(mode="json"),
                 "num_requests": len(reqs)}

    import vllm
    from vllm import LLM, SamplingParams

    res["vllm"] = vllm.__version__
    t0 = time.perf_counter()
    llm = LLM(**args)
    res["engine_init_s"] = time.perf_counter() - t0
    res["engine"] = engine_info(llm.llm_engine.vllm_config)
    write_json_atomic(a.out, res)
    print(f"OFFLINE engine up in {res['engine_init_s']:.1f}s kv_blocks={res['engine'].get('num_gpu_blocks')}",
          flush=True)

    prompts = [{"prompt_token_ids": list(r.prompt_token_ids)} for r in reqs]
    params = [_sampling(r, SamplingParams) for r in reqs]
    # warm-up like the runner's: the first two requests, 8 tokens each
    llm.generate(prompts[:2], [SamplingParams(max_tokens=8, ignore_eos=True)] * 2, use_tqdm=False)

    runs = []
    for i in range(a.repeats):
        t0 = time.perf_counter()
        outs = llm.generate(prompts, params, use_tqdm=False)
        dt = time.perf_counter() - t0
        n_out = sum(len(o.outputs[0].token_ids) for o in outs)
        n_in = sum(len(o.prompt_token_ids) for o in outs)
        runs.append({"wall_s": dt, "output_tokens": n_out, "input_tokens": n_in, "output_tok_s": n_out / dt,
                     "req_s": len(outs) / dt})
        res["throughput"] = {"runs": runs, "median_output_tok_s": statistics.median(r["output_tok_s"] for r in runs)}
        write_json_atomic(a.out, res)
        print(f"OFFLINE generate #{i}: {len(outs)} requests, {n_out} output tokens in {dt:.3f}s = "
              f"{n_out / dt:.0f} tok/s", flush=True)

    if a.skip_single_stream:
        res["gpu_memory"] = _gpu_memory()
        write_json_atomic(a.out, res)
        llm.llm_engine.engine_core.shutdown()
        return 0
    # single stream: prefill + 1 token, then prefill + 1 + K tokens; the difference is K decode steps
    one = prompts[0]
    k = a.decode_tokens
    pre, full = [], []
    for _ in range(5):
        t0 = time.perf_counter()
        llm.generate([one], SamplingParams(max_tokens=1, ignore_eos=True), use_tqdm=False)
        pre.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        o = llm.generate([one], SamplingParams(max_tokens=1 + k, ignore_eos=True), use_tqdm=False)
        full.append(time.perf_counter() - t0)
        assert len(o[0].outputs[0].token_ids) == 1 + k
    per_tok = [(f - p) / k for f, p in zip(full, pre)]
    res["single_stream"] = {"prompt_tokens": len(one["prompt_token_ids"]), "decode_tokens": k,
                            "prefill_plus_1_s": pre, "prefill_plus_1_s_median": statistics.median(pre),
                            "decode_s_per_token": per_tok,
                            "decode_s_per_token_median": statistics.median(per_tok)}
    res["gpu_memory"] = _gpu_memory()
    write_json_atomic(a.out, res)
    print(f"OFFLINE single stream: prefill({len(one['prompt_token_ids'])})+1 "
          f"{statistics.median(pre) * 1e3:.1f} ms, decode {statistics.median(per_tok) * 1e3:.3f} ms/token",
          flush=True)
    llm.llm_engine.engine_core.shutdown()
    return 0


def _gpu_memory() -> dict:
    """Device-wide memory in use while the engine is up (its engine-core process included)."""
    try:
        import torch

        if torch.cuda.is_available():
            free, total = torch.cuda.mem_get_info()
            return {"used_bytes": total - free, "total_bytes": total}
    except Exception as e:  # noqa: BLE001 - informational only
        return {"error": repr(e)}
    return {}


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
