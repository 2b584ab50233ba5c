"""containers/: the Docker lifecycle on a real Docker engine with the locally built base image.

No engine here: small real servers (python -m http.server) and shell commands stand in for the
*workload* of the container, never for Docker. The model-serving images are exercised end to end
in tests/containers/test_containers_e2e.py. CI must not skip these: without a Docker engine they fail there
(CI=true); on a developer machine they skip with the reason.
"""
from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli

pytestmark = pytest.mark.docker
BASE_IMAGE = "llm-compare/base:bookworm"
SETUP_HINT = "run scripts/setup.d/20-docker.sh (installs docker.io, starts dockerd, builds the images)"


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI must run the container tests: {SETUP_HINT}")
    pytest.skip(f"{reason}; {SETUP_HINT}")


@pytest.fixture(scope="session")
def docker_client():
    from core.errors import UserError
    from containers.manager import connect

    try:
        return connect()
    except UserError as e:
        _unavailable(f"no Docker engine: {e}")


def require_image(client, image: str) -> None:
    from docker.errors import ImageNotFound

    try:
        client.images.get(image)
    except ImageNotFound:
        _unavailable(f"image {image} is not built")


def _ours(client, **labels) -> list:
    filters = [f"llm-compare.{k.replace('_', '-')}={v}" for k, v in labels.items()] or ["llm-compare.owner-pid"]
    return client.containers.list(all=True, filters={"label": filters})


async def _http_ok(url: str) -> bool:
    import httpx

    try:
        async with httpx.AsyncClient(timeout=1.0) as c:
            return (await c.get(url + "/")).status_code == 200
    except httpx.HTTPError:
        return False


def test_lifecycle_loopback_port_labels_readonly_mount_env_shm_logs(docker_client, tmp_path):
    from containers.manager import ContainerSpec, ManagedContainer

    require_image(docker_client, BASE_IMAGE)
    (tmp_path / "weights.txt").write_text("w")
    spec = ContainerSpec(image=BASE_IMAGE, command=("python3", "-m", "http.server", "80"), container_port=80,
                         env=(("MODE", "bench"), ("HF_TOKEN", "hf_s3cret")), mounts=((str(tmp_path), "/models/m"),),
                         shm_size="256m")
    c = ManagedContainer(spec, backend="lifecycle-test")
    with c:
        url = c.start()
        waited = asyncio.run(c.wait_ready(_http_ok, timeout_s=60))
        assert waited < 60
        attrs = docker_client.containers.get(c.container.id).attrs
        binding = attrs["HostConfig"]["PortBindings"]["80/tcp"][0]
        assert binding["HostIp"] == "127.0.0.1" and url == f"http://127.0.0.1:{binding['HostPort']}"
        assert attrs["HostConfig"]["ShmSize"] == 256 * 2**20
        labels = attrs["Config"]["Labels"]
        assert labels["llm-compare.backend"] == "lifecycle-test"
        assert labels["llm-compare.owner-pid"] == str(os.getpid())
        assert labels["llm-compare.run-id"]
        out = c.container.exec_run(["sh", "-c", "cat /models/m/weights.txt; touch /models/m/x; echo rc=$?; "
                                                "echo $MODE; echo token=$HF_TOKEN"]).output.decode()
        assert "w" in out and "Read-only file system" in out and "rc=1" in out and "bench" in out
        c.container.exec_run(["sh", "-c", "echo token=$HF_TOKEN > /proc/1/fd/1"])
        time.sleep(0.3)
        assert "token=***" in c.logs() and "hf_s3cret" not in c.logs()  # secrets never reach logs
        assert "hf_s3cret" not in json.dumps(c.describe())
    assert _ours(docker_client, backend="lifecycle-test") == []
    assert "GET / HTTP/1.1" in (c.final_logs or "")


def test_exit_during_start_names_the_last_log_lines(docker_client):
    from containers.manager import ContainerExitedError, ContainerSpec, ManagedContainer

    require_image(docker_client, BASE_IMAGE)
    spec = ContainerSpec(image=BASE_IMAGE, command=("sh", "-c", "echo loading; echo 'fatal: no weights' >&2; exit 3"))
    with ManagedContainer(spec, backend="exit-test") as c:
        c.start()
        with pytest.raises(ContainerExitedError) as e:
            asyncio.run(c.wait_ready(_http_ok, timeout_s=60))
    msg = str(e.value)
    assert "exited with code 3" in msg and "fatal: no weights" in msg and "\n" not in msg
    assert _ours(docker_client, backend="exit-test") == []


def test_missing_image_fails_before_anything_starts(docker_client, tiny_model, tmp_path):
    image = "llm-compare/no-such-image:0"
    rid = f"missing-image-{os.getpid()}"
    r = run_cli("run", "--backends", "vllm-container", "--model", str(tiny_model), "--num-requests", "2",
                "--native", f"vllm-container.image={image}", "--out", str(tmp_path), timeout=120,
                env={"LLM_COMPARE_RUN_ID": rid})
    assert r.returncode == 2, r.stderr
    lines = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in r.stderr
    assert f"not present locally; pull it with `docker pull {image}` or pass --pull" in lines[0]
    assert _ours(docker_client, run_id=rid) == []


def test_pull_is_opt_in_and_reports_failure(docker_client):
    from containers.manager import ImageNotPresentError, ensure_image

    with pytest.raises(ImageNotPresentError, match="not present locally"):
        ensure_image(docker_client, "llm-compare/no-such-image:0")
    # with pull the engine really tries (no registry is reachable from this machine/CI)
    with pytest.raises(ImageNotPresentError, match="pulling llm-compare/no-such-image:0 failed"):
        ensure_image(docker_client, "llm-compare/no-such-image:0", pull=True)


def test_daemon_not_running_is_one_line(tiny_model, tmp_path):
    r = run_cli("run", "--backends", "vllm-container", "--model", str(tiny_model), "--num-requests", "2",
                "--out", str(tmp_path), env={"DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock"}, timeout=120)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    err = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert len(err) == 1 and "Docker daemon is not reachable" in err[0] and "start it" in err[0]


def test_port_conflict_is_one_line(docker_client, tiny_model, tmp_path):
    require_image(docker_client, "llm-compare/vllm-cpu:0.32.0")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = run_cli("run", "--backends", "vllm-container", "--model", str(tiny_model), "--num-requests", "2",
                    "--native", f"vllm-container.host_port={port}", "--out", str(tmp_path), timeout=120,
                    env={"LLM_COMPARE_RUN_ID": f"port-{os.getpid()}"})
    assert r.returncode == 2, r.stderr
    err = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert len(err) == 1 and f"port 127.0.0.1:{port} is already in use" in err[0]
    assert _ours(docker_client, run_id=f"port-{os.getpid()}") == []


def test_gpus_unavailable_is_one_line(docker_client, tiny_model, tmp_path):
    require_image(docker_client, "llm-compare/vllm-cpu:0.32.0")
    if any("nvidia" in k for k in (docker_client.info().get("Runtimes") or {})):
        pytest.skip("this Docker engine has the NVIDIA runtime: GPUs are available")
    r = run_cli("run", "--backends", "vllm-container", "--model", str(tiny_model), "--num-requests", "2",
                "--native", "vllm-container.gpus=all", "--out", str(tmp_path), timeout=120,
                env={"LLM_COMPARE_RUN_ID": f"gpus-{os.getpid()}"})
    assert r.returncode == 2, r.stderr
    err = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert len(err) == 1 and "GPUs were requested (gpus=all)" in err[0] and "gpus=none" in err[0]
    assert _ours(docker_client, run_id=f"gpus-{os.getpid()}") == []


def _owner_script(body: str) -> str:
    return textwrap.dedent("""
        import os, signal, sys, time
        sys.path.insert(0, %r)
        from containers.manager import ContainerSpec, ManagedContainer
        c = ManagedContainer(ContainerSpec(image=%r, command=("sleep", "600")), backend=sys.argv[1])
    """) % (str(ROOT), BASE_IMAGE) + textwrap.dedent(body)


@pytest.mark.parametrize("how", ["sigkill", "sigint", "sigterm", "exception"])
def test_no_orphan_however_the_owner_ends(docker_client, how):
    """Killed outright (watchdog), Ctrl-C (context manager), SIGTERM (handler), crash (exit hooks)."""
    require_image(docker_client, BASE_IMAGE)
    tag = f"owner-{how}-{os.getpid()}"
    body = {
        "sigkill": "c.start(); print('up', flush=True); os.kill(os.getpid(), signal.SIGKILL)",
        # a terminal's Ctrl-C: Python's own SIGINT handler, set here because a test runner started
        # as a background job of a non-interactive shell has SIGINT ignored, which this process
        # would inherit (it then slept out its 60 s before the `with` stopped the container)
        "sigint": ("signal.signal(signal.SIGINT, signal.default_int_handler)\n"
                   "with c:\n    c.start(); print('up', flush=True); time.sleep(120)"),
        "sigterm": "c.start(); print('up', flush=True); time.sleep(120)",
        "exception": "c.start(); print('up', flush=True); raise RuntimeError('boom')",
    }[how]
    p = subprocess.Popen([sys.executable, "-c", _owner_script(body), tag], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "up"
    assert len(_ours(docker_client, backend=tag)) == 1
    if how == "sigint":
        p.send_signal(signal.SIGINT)
    elif how == "sigterm":
        p.send_signal(signal.SIGTERM)
    # its teardown stops (up to 10 s) and removes the container through dockerd; a signal left
    # unhandled would have it sleep on past this wait
    try:
        p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()  # its watchdog then removes the container
        p.wait()
        pytest.fail(f"the owner did not end within 60 s of its {how}")
    deadline = time.monotonic() + 15
    while _ours(docker_client, backend=tag) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _ours(docker_client, backend=tag) == [], f"container left behind after {how}"


def test_prune_removes_only_containers_of_dead_runs(docker_client):
    require_image(docker_client, BASE_IMAGE)
    import psutil

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()  # a pid that has exited
    me = psutil.Process()
    common = {"llm-compare.run-id": "prune-test", "llm-compare.owner-host": socket.gethostname()}
    made = []
    try:
        for owner, start in ((dead, "1.0"), (str(me.pid), f"{me.create_time():.2f}"), (str(me.pid), "2.0")):
            made.append(docker_client.containers.create(
                BASE_IMAGE, ["sleep", "600"], labels={**common, "llm-compare.owner-pid": owner,
                                                      "llm-compare.owner-start": start,
                                                      "llm-compare.backend": f"prune-{len(made)}"}))
        ls = run_cli("containers", "ls", "--json")
        assert ls.returncode == 0, ls.stderr
        states = {r["backend"]: r["owner"] for r in json.loads(ls.stdout) if r["run_id"] == "prune-test"}
        # exited pid -> dead; our pid with our start time -> alive; our pid, other start -> recycled pid: dead
        assert states == {"prune-0": "dead", "prune-1": "alive", "prune-2": "dead"}
        dry = run_cli("containers", "prune", "--dry-run")
        assert "would remove" in dry.stdout and len(_ours(docker_client, run_id="prune-test")) == 3
        r = run_cli("containers", "prune")
        assert r.returncode == 0 and "removed" in r.stdout
        left = [c.labels["llm-compare.backend"] for c in _ours(docker_client, run_id="prune-test")]
        assert left == ["prune-1"]
    finally:
        for c in made:
            try:
                c.remove(force=True)
            except Exception:
                pass


def test_plan_shows_image_launcher_and_container_settings(tiny_model):
    r = run_cli("plan", "--backends", "tgi,vllm-container", "--model", str(tiny_model), "--max-model-len", "512",
                "--native", "tgi.image=llm-compare/tgi-double:0.32.0", "--native", "tgi.gpus=none",
                "--format", "json", env={"LLM_COMPARE_API_KEY": "topsecret"})
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)["backends"]
    tgi = plan["tgi"]
    assert tgi["image"] == "llm-compare/tgi-double:0.32.0"
    assert tgi["launcher_argv"][:3] == ["text-generation-launcher", "--model-id", f"/models/{Path(tiny_model).name}"]
    assert tgi["launcher_env"]["API_KEY"].startswith("***") and "topsecret" not in r.stdout
    assert tgi["container"]["port"].startswith("127.0.0.1:") and tgi["container"]["port"].endswith("-> 80/tcp")
    assert tgi["container"]["mounts"] == [f"{Path(tiny_model).resolve()}:/models/{Path(tiny_model).name}:ro"]
    assert tgi["container"]["gpus"] == "none" and tgi["container"]["shm_size"] == "1g"
    default = json.loads(run_cli("plan", "--backends", "tgi", "--format", "json").stdout)["backends"]["tgi"]
    assert default["image"] == "ghcr.io/huggingface/text-generation-inference:3.3.7"
    assert default["container"]["gpus"] == "all"
    assert plan["vllm-container"]["container"]["port"].endswith("-> 8000/tcp")


def test_backends_lists_tgi_notes():
    r = run_cli("backends", "--json")
    rows = {x["name"]: x for x in json.loads(r.stdout)}
    notes = " ".join(rows["tgi"]["notes"])
    assert "maintenance mode" in notes and "cannot force output length" in notes
    assert rows["tgi"]["capabilities"]["forced_output_length"] is False
    assert "vllm-container" in rows


def test_container_env_option_reaches_the_plan_and_refuses_secrets_and_bad_names(tiny_model):
    r = run_cli("plan", "--backends", "vllm-container,tgi", "--model", str(tiny_model),
                "--native", "vllm-container.env=VLLM_ENABLE_V1_MULTIPROCESSING=0, OMP_NUM_THREADS=2",
                "--native", "tgi.env=RUST_LOG=debug", "--format", "json")
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)["backends"]
    assert plan["vllm-container"]["container"]["env"] == {"OMP_NUM_THREADS": "2", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    assert "-e OMP_NUM_THREADS=2 -e VLLM_ENABLE_V1_MULTIPROCESSING=0" in plan["vllm-container"]["container"]["docker_run"]
    assert plan["tgi"]["container"]["env"]["RUST_LOG"] == "debug"  # beside the launcher's own env
    for bad, needle in (("HF_TOKEN=abc", "looks like a secret"), ("1X=2", "not an environment variable name"),
                        ("JUSTANAME", "is not NAME=VALUE")):
        r = run_cli("plan", "--backends", "vllm-container", "--model", str(tiny_model),
                    "--native", f"vllm-container.env={bad}")
        assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and "abc" not in r.stderr
