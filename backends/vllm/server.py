"""``vllm-server``: vLLM's real OpenAI API server as a subprocess, driven over HTTP.

Same spec -> same engine config as the in-process ``vllm`` backend (adapters.vllm builds both:
``vllm_engine_args`` for AsyncLLM, ``vllm_server_argv`` for the server), so
``compare run --backends vllm,vllm-server`` isolates the API-server + HTTP overhead.

Lifecycle (backends/server_process.py): binds 127.0.0.1 on a free port, its own process group
under a guard, stdout and stderr captured to ``<results>/logs/vllm-server.log`` (or a temp file
when no results directory is attached), health polled until ready or the process dies; the
whole group is stopped at the end, and when this process dies.
"""
from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from adapters.spec import ServingSpec
from adapters.vllm import VllmPlan, server_argv, vllm_plan
from backends.http_backends import HttpStreamBackend
from backends.server_process import HOST, START_TIMEOUT_S, ServerProcess, free_port
from core.records import BackendDescription


def server_command(spec: ServingSpec, port: int, host: str = HOST,
                   engine_args: dict[str, Any] | None = None) -> list[str]:
    """``engine_args``: the run's resolved (and placed) engine args; default: resolved here."""
    if engine_args is None:
        from backends.models.dummy import engine_args as placed
        from backends.models.probe import probe

        engine_args = placed(vllm_plan(spec, probe(spec.model)))
    return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", *server_argv(engine_args, host, port)]


def server_plan(spec: ServingSpec, native: VllmPlan, target: None = None) -> dict[str, Any]:
    """What would run (port chosen at start); names a dummy copy without writing it."""
    from backends.models.dummy import engine_args

    args = engine_args(native, write=False)
    return {"command": server_command(spec, 0, engine_args=args)[1:], "engine_args": args,
            "protocol": "openai (/v1/completions, token-id prompts, return_token_ids)"}


class VllmServerBackend(HttpStreamBackend):
    framework = "vllm"

    def __init__(self, spec: ServingSpec, name: str = "vllm-server", native: VllmPlan | None = None,
                 **kw: Any) -> None:
        from backends.models.dummy import engine_args
        from backends.models.probe import probe

        # the run's plan (backends/registry.py), else resolved here; UnsupportedSpecError before any I/O
        self.engine_args = engine_args(native or vllm_plan(spec, probe(spec.model)))
        super().__init__(spec, name, protocol="openai", model=spec.model, metrics="prometheus", **kw)
        self.results_dir: Path | None = None
        self._server: ServerProcess | None = None
        self._argv: list[str] = []
        self._health_s: float | None = None
        self._tmp: str | None = None  # the server's TMPDIR while it runs

    def attach_results_dir(self, path: Path) -> None:
        """Called by the runner: the server log goes next to the results."""
        self.results_dir = Path(path)

    async def _start_server(self) -> None:
        from core.lazy import require

        vllm = require("vllm", "vllm")
        self._version = getattr(vllm, "__version__", "unknown")
        port = free_port()
        self._argv = server_command(self.spec, port, engine_args=self.engine_args)
        safe = self.name.replace("/", "_").replace(":", "_").replace("@", "_")
        log_dir = self.results_dir or Path(tempfile.mkdtemp(prefix="llm-compare-server-"))
        # the server's own temp dir, removed at stop: vLLM leaves files there (its file-store
        # rendezvous, /tmp/vllm_dist_*, one per start)
        # a short name: vLLM puts ZMQ IPC sockets in TMPDIR, whose paths must stay under 107 bytes
        self._tmp = tempfile.mkdtemp(prefix="lc-vs-")
        self._server = ServerProcess(self._argv, log_dir / f"{safe}.log", env={"TMPDIR": self._tmp})
        self._server.start()
        self.base_url = f"http://{HOST}:{port}"
        self._health_s = await self._server.wait_healthy(self.base_url + "/health", START_TIMEOUT_S)

    async def _stop_server(self) -> None:
        try:
            if self._server is not None:
                await asyncio.get_running_loop().run_in_executor(None, self._server.stop)
        finally:
            if self._tmp is not None:
                shutil.rmtree(self._tmp, ignore_errors=True)
                self._tmp = None

    def describe(self) -> BackendDescription:
        d = super().describe()
        d.native_config.update({"engine_args": self.engine_args, "server_argv": self._argv[1:]})
        d.extra.update({"server_log": str(self._server.log_path) if self._server else None,
                        "health_after_s": self._health_s})
        if self._server is not None and self.results_dir is None:
            # no results directory attached: keep the log's tail in the results themselves
            d.extra["server_log_tail"] = self._server.log_tail(40).split(" | ")
        return d
