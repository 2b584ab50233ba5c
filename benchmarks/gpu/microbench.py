"""The two ceilings of the roofline, measured on the machine itself (not the datasheet's):

- copy bandwidth: a large device-to-device ``Tensor.copy_``, bytes read + bytes written per
  second (what a decode step's weight/KV streaming can at best approach);
- matrix rate: a large square bf16 ``torch.mm``, 2*n^3 FLOP per product (what prefill can at best
  approach).

Each is the median of several timed repetitions after warm-ups, timed with CUDA events on a GPU
and perf_counter on a CPU (the CPU path exists so the same script is tested without a GPU).
Usage: python benchmarks/gpu/microbench.py OUT.json [--small]
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path


def _timer(device: str):
    import torch

    if device == "cuda":
        def run(fn, reps: int) -> list[float]:
            out = []
            for _ in range(reps):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                fn()
                b.record()
                b.synchronize()
                out.append(a.elapsed_time(b) / 1e3)
            return out
    else:
        def run(fn, reps: int) -> list[float]:
            out = []
            for _ in range(reps):
                t0 = time.perf_counter()
                fn()
                out.append(time.perf_counter() - t0)
            return out
    return run


def measure(small: bool = False) -> dict:
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    timed = _timer(device)
    # 4 GiB per buffer on the GPU: far beyond the 60 MB L2, so every byte goes to HBM
    nbytes = (64 << 20) if small or device == "cpu" else (4 << 30)
    src = torch.empty(nbytes // 2, dtype=torch.bfloat16, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    copy_s = timed(lambda: dst.copy_(src), 10)
    del src, dst
    n = 512 if small or device == "cpu" else 8192
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    a = torch.randn(n, n, dtype=dtype, device=device)
    b = torch.randn(n, n, dtype=dtype, device=device)
    for _ in range(3):
        torch.mm(a, b)
    mm_s = timed(lambda: torch.mm(a, b), 10)
    t_copy, t_mm = statistics.median(copy_s), statistics.median(mm_s)
    out = {
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "copy": {"bytes_per_buffer": nbytes, "median_s": t_copy, "all_s": copy_s,
                 "bandwidth_bytes_s": 2 * nbytes / t_copy},  # read + write
        "matmul": {"n": n, "dtype": str(dtype).replace("torch.", ""), "median_s": t_mm, "all_s": mm_s,
                   "flops_s": 2 * n ** 3 / t_mm},
    }
    if device == "cuda":
        free, total = torch.cuda.mem_get_info()
        props = torch.cuda.get_device_properties(0)
        out["gpu"] = {"name": props.name, "total_memory_bytes": total, "sm_count": props.multi_processor_count,
                      "capability": f"{props.major}.{props.minor}"}
    return out


if __name__ == "__main__":
    res = measure(small="--small" in sys.argv)
    Path(sys.argv[1]).write_text(json.dumps(res, indent=2) + "\n")
    print(f"MICROBENCH copy {res['copy']['bandwidth_bytes_s'] / 1e12:.3f} TB/s (read+write), "
          f"matmul {res['matmul']['flops_s'] / 1e12:.1f} TFLOP/s ({res['matmul']['dtype']})", flush=True)
