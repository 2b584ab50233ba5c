"""The engine cache's faults through the CLI, with the real llama.cpp GGUF conversion: a GGUF entry
damaged on disk is detected by its digest and made again by the next `compare run`, and two runs
that need the same GGUF at once convert it once (the second waits on the first, or finds it made).
The GGUFs go to a fresh engine cache (LLM_COMPARE_ENGINE_CACHE); the llama-server build and the
pinned converter source are the ones the machine already has (built by the set-up)."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import TINY_SPEC_ARGS, VENV_BIN, run_cli

pytestmark = pytest.mark.engine
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


@pytest.fixture(scope="module")
def two_runs(tiny_model, tmp_path_factory):
    """An empty engine cache beside the machine's (the prebuilt llama-server, the converter source)
    and two `compare run`s started at once that both need its GGUF: ONE pair per module, since the
    entry they leave is also the one the damage test cuts short (one conversion and one run fewer)."""
    tmp = tmp_path_factory.mktemp("gguf-cache")
    root, env = empty_engine_cache(tmp)
    procs = [subprocess.Popen([str(VENV_BIN / "compare"), "run", *RUN, "--model", str(tiny_model),
                               "--out", str(tmp / "o"), "--run-id", rid], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env={**os.environ, **env})
             for rid in ("a", "b")]
    outs = [p.communicate(timeout=900) for p in procs]
    logs = [(tmp / "o" / rid / "logs" / "llamacpp.log").read_text() if (tmp / "o" / rid / "logs").exists() else ""
            for rid in ("a", "b")]
    # what the concurrent test asserts, taken before the damage test touches the cache
    return SimpleNamespace(root=root, env=env, codes=[p.returncode for p in procs], errs=[o[1] for o in outs],
                           logs=logs, entries=_gguf_entries(root),
                           half_built=[p for p in (root / ".tmp").glob("*") if p.is_dir()])


def _gguf_entries(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.glob("*/model.gguf"))


def test_two_runs_needing_one_gguf_convert_it_once(two_runs):
    assert two_runs.codes == [0, 0], [e[-1500:] for e in two_runs.errs]
    assert sorted(log.count("to GGUF f32") for log in two_runs.logs) == [0, 1], [log[-1500:] for log in two_runs.logs]
    assert len(two_runs.entries) == 1
    assert not two_runs.half_built  # no half-built entry left


def test_a_damaged_gguf_entry_is_made_again_by_the_next_run(tiny_model, tmp_path, two_runs):
    root, env = two_runs.root, two_runs.env
    assert two_runs.codes == [0, 0], [e[-1500:] for e in two_runs.errs]  # (the runs that made the entry)
    [entry] = _gguf_entries(root)
    gguf = entry / "model.gguf"
    size = gguf.stat().st_size
    with open(gguf, "r+b") as f:  # cut short, as a full disk or a killed copy would leave it
        f.truncate(size // 2)
    r = run_cli("run", *RUN, "--model", str(tiny_model), "--out", str(tmp_path / "o"), "--run-id", "b", env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    said = (tmp_path / "o" / "b" / "logs" / "llamacpp.log").read_text()  # the backend's preparation logs there
    assert "is damaged" in said and "building it again" in said and "to GGUF f32" in said, said[-2000:]
    assert [p.name for p in _gguf_entries(root)] == [entry.name] and gguf.stat().st_size == size
    run = json.loads((tmp_path / "o" / "b" / "run.json").read_text())
    assert run["backends"]["llamacpp"]["status"] == "complete"
