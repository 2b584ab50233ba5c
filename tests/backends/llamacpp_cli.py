"""`compare run --backends llamacpp` driven as a user would, into an engine cache of the test's own:
the run's arguments, an empty cache beside the machine's, starting, stopping and watching the run."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil

from tests.conftest import TINY_SPEC_ARGS, VENV_BIN

RUN = ("--backends", "llamacpp", *TINY_SPEC_ARGS, "--num-requests", "2", "--concurrency", "1",
       "--output-len", "8", "--warmup", "0", "--quality", "off")


def empty_engine_cache(tmp: Path) -> tuple[Path, dict[str, str]]:
    """An empty engine cache under TMP beside the machine's (the prebuilt llama-server, the converter
    source linked in), and the environment that points `compare` at it."""
    from backends.llamacpp.build import server_binary
    from backends.models.engine_cache import EngineCache

    server, _ = server_binary()
    main = EngineCache().root
    root = tmp / "engines"
    root.mkdir()
    for d in (".src", ".downloads"):
        if (main / d).exists():
            os.symlink(main / d, root / d)
    return root, {"LLM_COMPARE_ENGINE_CACHE": str(root), "LLM_COMPARE_LLAMA_SERVER": str(server)}


def gguf_entries(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.glob("*/model.gguf"))


def start(tiny_model: Path, out: Path, rid: str, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([str(VENV_BIN / "compare"), "run", *RUN, "--model", str(tiny_model), "--out", str(out),
                             "--run-id", rid], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, **env}, start_new_session=True)


def wait_for(p: subprocess.Popen, ready, what: str, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert p.poll() is None, f"compare run ended before {what}: {p.stdout.read()[-2000:] if p.stdout else ''}"
        if ready():
            return
        time.sleep(0.01)
    raise AssertionError(f"never reached: {what}")


def children(p: subprocess.Popen, needle: str) -> list[psutil.Process]:
    out = []
    for c in psutil.Process(p.pid).children(recursive=True):
        try:
            if needle in " ".join(c.cmdline()) and c.status() != psutil.STATUS_ZOMBIE:
                out.append(c)
        except psutil.Error:
            pass
    return out


def left(root: Path, timeout_s: float = 20) -> list[str]:
    """Live processes working in the engine cache ``root`` (a converter, cmake, ninja, a compiler),
    after up to ``timeout_s`` for the reaper of a killed run to end them."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = []
        for q in psutil.process_iter(["cmdline", "status"]):
            cmd = " ".join(q.info["cmdline"] or [])
            if str(root) in cmd and q.info["status"] != psutil.STATUS_ZOMBIE:
                left.append(f"{q.pid} {cmd[:160]}")
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def stop(p: subprocess.Popen, how: str) -> str:
    sig = {"ctrl-c": signal.SIGINT, "sigkill": signal.SIGKILL, "sigterm": signal.SIGTERM}[how]
    if how == "sigterm":
        os.kill(p.pid, sig)  # `kill PID`: only compare gets it
    else:
        os.killpg(p.pid, sig)  # the terminal's Ctrl-C, or the whole group killed
    out, _ = p.communicate(timeout=120)
    return out


def status(run_dir: Path) -> tuple[str, str | None]:
    run = json.loads((run_dir / "run.json").read_text())
    b = run["backends"].get("llamacpp", {})
    return run["status"], b.get("error")
