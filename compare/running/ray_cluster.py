"""Joining a Ray cluster (``compare run --ray auto|HOST:PORT``) and describing it in run.json.

Ray is imported only by :func:`connect`; :func:`check_address` validates ``--ray`` before anything
is written, without importing it.
"""
from __future__ import annotations

import os
import socket
from typing import Any

from core.errors import UserError
from core.engine_guard import check_start

# the custom resource of one CPU node's "accelerator": `ray start --resources '{"llmc_slot": 1}'`
SLOT = "llmc_slot"
# environment the cells inherit from the driver (tool and engine settings); nothing else is sent
ENV_PREFIXES = ("LLM_COMPARE_", "VLLM_", "OMP_", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TOKENIZERS_")
SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD")


# the driver's own process tag (containers/watchdog.py): a cell tags its engines with its own
NOT_FORWARDED = ("LLM_COMPARE_OWNER",)


def _forwarded_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if k.startswith(ENV_PREFIXES) and k not in NOT_FORWARDED and not any(w in k for w in SECRET_WORDS)}


def check_address(address: str) -> None:
    """Before anything is written: Ray is installed and a head answers at ``address`` (one line
    naming the fix otherwise). Ray itself is not imported here."""
    import importlib.util

    if importlib.util.find_spec("ray") is None:
        raise UserError("--ray needs Ray: pip install 'llm-compare[ray]'")
    if address != "auto":
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise UserError(f"--ray {address!r}: expected auto or HOST:PORT of a Ray head "
                            f"(`ray start --head --port 6379` prints it)")
        if host in ("127.0.0.1", "localhost", "::1"):
            # a head on the loopback address (this machine only): Ray would otherwise advertise the
            # machine's outward address for the driver's node and not find its raylet
            os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        try:
            socket.create_connection((host, int(port)), timeout=3).close()
        except OSError as e:
            raise UserError(f"--ray {address}: no Ray head answers there ({e.strerror or e}); start one "
                            f"with `ray start --head --node-ip-address {host} --port {port}`") from None


def connect(address: str) -> Any:
    """``ray.init`` against an existing cluster; a missing one is one line naming the fix."""
    check_address(address)
    check_start(f"a Ray connection ({address})")
    import ray

    if ray.is_initialized():
        return ray
    try:
        ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level="ERROR",
                 configure_logging=True, runtime_env={"env_vars": _forwarded_env()})
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise UserError(f"--ray {address}: cannot join the Ray cluster ({str(e).splitlines()[0]}); "
                        f"start one with `ray start --head`, or pass its HOST:PORT") from None
    return ray


def cluster_section(ray: Any, address: str) -> dict[str, Any]:
    """run.json ``ray``: the cluster as the run found it; cells and load shards are added to it."""
    nodes = [{"node_id": n["NodeID"][:12], "ip": n["NodeManagerAddress"],
              "resources": {k: v for k, v in n["Resources"].items() if not k.startswith("node:")}}
             for n in ray.nodes() if n.get("Alive")]
    return {"address": address, "ray_version": ray.__version__, "nodes": nodes, "cells": [], "load_shards": []}
