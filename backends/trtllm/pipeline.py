"""The TensorRT-LLM quantize -> build pipeline as container runs, published into the engine cache.

Each step (adapters.trtllm.Step) is one run-to-completion container: the source checkpoint mounted
read-only at /model, the engine-cache temp dir mounted read-write at /work (so every step of one
build shares it, and the finished tree is renamed into the cache on the host), a Model-Optimizer
checkout at /opt/Model-Optimizer when the step needs one. Containers run as the calling user (so
the cache stays removable without root), carry the container manager's labels (``compare
containers prune``) and its teardown (atexit, SIGTERM, watchdog). A failing step raises
BuildFailed with its last log lines; the cache then publishes nothing.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from adapters.trtllm import MODEL_DIR, MODELOPT_DIR, WORK_DIR, TrtllmPlan
from backends.models.engine_cache import BuildFailed, EngineCache, Entry, cache_key, checkpoint_digest
from containers.manager import ContainerSpec, ManagedContainer, create_tracked, device_requests, ensure_image

STEP_TIMEOUT_S = 6 * 3600.0
LOG_TAIL_LINES = 25


def checkpoint_quant(model_dir: str | os.PathLike[str]) -> str | None:
    """QuantAlgo a checkpoint already carries (adapters.trtllm_support.checkpoint_quant on the
    probed directory). None for an unquantized (or unknown) checkpoint."""
    from adapters.trtllm_support import checkpoint_quant as of_model
    from backends.models.probe import probe_model

    return of_model(probe_model(str(model_dir)))


class StepContainer(ManagedContainer):
    """A container that runs one command to completion with a read-write work mount."""

    def __init__(self, spec: ContainerSpec, backend: str, rw_mounts: dict[str, str], client: Any = None) -> None:
        super().__init__(spec, backend, client=client)
        self.rw_mounts = rw_mounts  # host path -> container path

    def _create_and_start(self) -> None:
        volumes = {h: {"bind": c, "mode": "ro"} for h, c in self.spec.mounts}
        volumes.update({h: {"bind": c, "mode": "rw"} for h, c in self.rw_mounts.items()})
        kw: dict[str, Any] = dict(
            image=self.spec.image, command=list(self.spec.command), name=self.name, detach=True,
            environment=dict(self.spec.env), labels=self.labels(), volumes=volumes,
            shm_size=self.spec.shm_size, init=True, working_dir=WORK_DIR)
        if os.getuid() != 0:  # files in the cache stay owned (and removable) by the user
            kw["user"] = f"{os.getuid()}:{os.getgid()}"
        if self.spec.gpus:
            kw["device_requests"] = device_requests(self.spec.gpus)
        self.container = create_tracked(self, kw)

    def run(self, timeout_s: float) -> tuple[int, str]:
        """Start, wait for the exit, return (exit code, full log). Always removes the container."""
        import requests

        try:
            self.start()
            try:
                result = self.container.wait(timeout=timeout_s)
            except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
                raise BuildFailed(f"{self.spec.command[0]} did not finish within {timeout_s:g} s "
                                  f"(raise --native trtllm.step_timeout_s)", self.logs(tail=LOG_TAIL_LINES))
            code = int(result.get("StatusCode", -1))
            return code, self.logs()
        finally:
            self.stop(timeout=5)


def run_steps(plan: TrtllmPlan, model_dir: str, work: Path, *, gpus: str | None, client: Any,
              backend: str, modelopt_dir: str | None, timeout_s: float = STEP_TIMEOUT_S) -> None:
    """Run every step of ``plan`` into ``work`` (the cache's temp dir). Logs go to work/logs/."""
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    for step in plan.steps:
        mounts = [(str(Path(model_dir).resolve()), MODEL_DIR)]
        if step.mounts_modelopt and modelopt_dir:
            mounts.append((str(Path(modelopt_dir).resolve()), MODELOPT_DIR))
        ensure_image(client, step.image)
        spec = ContainerSpec(image=step.image, command=step.argv, mounts=tuple(mounts), gpus=gpus,
                             env=(("HOME", "/tmp"),), shm_size="2g",
                             extra_labels=(("llm-compare.step", step.name),))
        t0 = time.perf_counter()
        code, log = StepContainer(spec, f"{backend}-{step.name}", {str(work): WORK_DIR}, client=client).run(timeout_s)
        (logs / f"{step.name}.log").write_text(log)
        if code != 0:
            tail = "\n".join(log.strip().splitlines()[-LOG_TAIL_LINES:])
            hint = ""
            if step.mounts_modelopt and not modelopt_dir and "hf_ptq.py" in log:
                hint = " (no Model-Optimizer checkout was mounted: --native trtllm.modelopt_dir=DIR)"
            raise BuildFailed(f"TensorRT-LLM {step.name} step failed with exit code {code} after "
                              f"{time.perf_counter() - t0:.0f} s in {step.image}{hint}", tail)


def build_key(plan: TrtllmPlan, model_dir: str, image_id: str, cache: EngineCache) -> tuple[str, dict[str, Any]]:
    """Cache key and the metadata `compare cache ls` shows."""
    digest = checkpoint_digest(model_dir, cache.root / ".hashmemo")
    fields = {**plan.cache_fields(), "checkpoint_sha256": digest, "image_id": image_id}
    meta = {**fields, "model": str(Path(model_dir).resolve()), "image": plan.image, "backend": "trtllm"}
    return cache_key(fields), meta


def ensure_artifact(plan: TrtllmPlan, model_dir: str, *, cache: EngineCache, client: Any, gpus: str | None,
                    backend: str, modelopt_dir: str | None, timeout_s: float = STEP_TIMEOUT_S) -> tuple[Entry, bool]:
    """The cached artifact for ``plan`` (built now if missing). Returns (entry, cache hit)."""
    image_id = ensure_image(client, plan.image).id
    key, meta = build_key(plan, model_dir, image_id, cache)
    return cache.get_or_build(key, meta, lambda work: run_steps(
        plan, model_dir, work, gpus=gpus, client=client, backend=backend, modelopt_dir=modelopt_dir,
        timeout_s=timeout_s))


def cache_row(m: dict) -> dict | None:
    """`compare cache ls`: a built engine's row (None for another engine's entry)."""
    if m.get("backend") != "trtllm" and ("kind" in m or "flow" not in m):
        return None
    return {"kind": "trtllm-engine", "model": m.get("model"), "flow": m.get("flow"), "quant": m.get("quant") or "none",
            "trtllm_version": m.get("version"), "built_by": f"TensorRT-LLM {m.get('version')}",
            "image_id": m.get("image_id"), "gpu": m.get("gpu_name"), "compute_capability": m.get("compute_capability")}
