"""What one serving container is told (image, command, env, mounts, port, GPUs, labels), as pure
data: `compare plan` prints it and containers/manager.py runs it. No Docker calls here except the
SDK's DeviceRequest type, imported lazily."""
from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from typing import Any

from core.errors import UserError

LABEL = "llm-compare"  # prefix of every label we set
OWNER_PID, OWNER_START, OWNER_HOST = f"{LABEL}.owner-pid", f"{LABEL}.owner-start", f"{LABEL}.owner-host"
RUN_ID, BACKEND = f"{LABEL}.run-id", f"{LABEL}.backend"
_SECRET_KEY = re.compile(r"TOKEN|SECRET|PASSWORD|API_KEY|AUTHTOKEN|CREDENTIAL", re.I)
# one id per process unless the caller names the run (LLM_COMPARE_RUN_ID)
_PROCESS_RUN_ID = time.strftime("%Y%m%d-%H%M%S") + f"-pid{os.getpid()}"


def run_id() -> str:
    return os.environ.get("LLM_COMPARE_RUN_ID") or _PROCESS_RUN_ID


def is_secret(key: str) -> bool:
    return bool(_SECRET_KEY.search(key))


@dataclass(frozen=True)
class ContainerSpec:
    """Everything ``docker run`` would be told. Pure data: plans print it."""

    image: str
    command: tuple[str, ...] = ()
    container_port: int = 80
    env: tuple[tuple[str, str], ...] = ()
    mounts: tuple[tuple[str, str], ...] = ()  # (host path, container path), always read-only
    shm_size: str | None = "1g"
    gpus: str | None = None  # None: no GPUs; "all", a count "2", or device ids "0,1"
    host_port: int | None = None  # None: a free port is picked at start
    entrypoint: tuple[str, ...] | None = None
    extra_labels: tuple[tuple[str, str], ...] = field(default=())

    def redacted_env(self) -> dict[str, str]:
        return {k: ("***" if is_secret(k) else v) for k, v in self.env}

    def settings(self) -> dict[str, Any]:
        """The container settings as `compare plan` shows them (secrets redacted)."""
        import shlex

        return {"image": self.image, "entrypoint": list(self.entrypoint) if self.entrypoint else "(image's)",
                "env": self.redacted_env(),
                "port": f"127.0.0.1:{self.host_port or '<free port>'} -> {self.container_port}/tcp",
                "mounts": [f"{h}:{c}:ro" for h, c in self.mounts], "shm_size": self.shm_size,
                "gpus": self.gpus or "none", "labels": f"{RUN_ID}, {BACKEND}, owner pid/start/host",
                "teardown": "stop + remove on exit/Ctrl-C/crash; watchdog removes it if we are killed",
                "docker_run": shlex.join(self.docker_run_argv())}

    def docker_run_argv(self, host_port: int | None = None, name: str | None = None) -> list[str]:
        """The equivalent ``docker run`` command line (secrets redacted)."""
        port = host_port or self.host_port
        argv = ["docker", "run", "-d", "--rm"] + (["--name", name] if name else [])
        argv += ["-p", f"127.0.0.1:{port if port else ''}:{self.container_port}"]
        for k, v in self.redacted_env().items():
            argv += ["-e", f"{k}={v}"]
        for h, c in self.mounts:
            argv += ["-v", f"{h}:{c}:ro"]
        if self.shm_size:
            argv += ["--shm-size", self.shm_size]
        if self.gpus:
            argv += ["--gpus", f'"device={self.gpus}"' if "," in self.gpus else self.gpus]
        if self.entrypoint:
            argv += ["--entrypoint", self.entrypoint[0]]
        return argv + [self.image, *(self.entrypoint[1:] if self.entrypoint else ()), *self.command]


def parse_gpus(value: Any) -> str | None:
    """'none'/None/0 -> None; 'all'; a count; or comma-separated device ids."""
    text = str(value).strip().lower() if value is not None else "none"
    if text in ("", "none", "0", "false"):
        return None
    if text == "all" or re.fullmatch(r"\d+(,\d+)*", text):
        return text
    raise UserError(f"gpus={value!r}: use all, a count (2), device ids (0,1) or none")


def device_requests(gpus: str | None) -> list[Any] | None:
    if not gpus:
        return None
    from docker.types import DeviceRequest

    if gpus == "all":
        return [DeviceRequest(count=-1, capabilities=[["gpu"]])]
    if "," in gpus:
        return [DeviceRequest(device_ids=gpus.split(","), capabilities=[["gpu"]])]
    return [DeviceRequest(count=int(gpus), capabilities=[["gpu"]])]
