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

import pytest

from tests.conftest import TINY_SPEC_ARGS, VENV_BIN, run_cli

pytestmark = pytest.mark.engine
RUN = ("--backends", "llamacpp", *TINY_SPEC_ARGS, "--num-requests", "2", "--concurrency", "1",
       "--output-len", "8", "--warmup", "0", "--quality", "off")


@pytest.fixture
def fresh_cache(tmp_path):
    """An empty engine cache beside the machine's: the prebuilt llama-server, the converter source."""
    from backends.llamacpp.build import server_binary
    from backends.models.engine_cache import EngineCache

    server, _ = server_binary()
    main = EngineCache().root
    root = tmp_path / "engines"
    root.mkdir()
    for d in (".src", ".downloads"):
        if (main / d).exists():
            os.symlink(main / d, root / d)
    return root, {"LLM_COMPARE_ENGINE_CACHE": str(root), "LLM_COMPARE_LLAMA_SERVER": str(server)}


def _gguf_entries(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.glob("*/model.gguf"))


def test_a_damaged_gguf_entry_is_made_again_by_the_next_run(tiny_model, tmp_path, fresh_cache):
    root, env = fresh_cache
    r = run_cli("run", *RUN, "--model", str(tiny_model), "--out", str(tmp_path / "o"), "--run-id", "a", env=env)
    assert r.returncode == 0, r.stderr[-2000:]
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


def test_two_runs_needing_one_gguf_convert_it_once(tiny_model, tmp_path, fresh_cache):
    root, env = fresh_cache
    procs = [subprocess.Popen([str(VENV_BIN / "compare"), "run", *RUN, "--model", str(tiny_model),
                               "--out", str(tmp_path / "o"), "--run-id", rid], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env={**os.environ, **env})
             for rid in ("a", "b")]
    outs = [p.communicate(timeout=900) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-1500:] for o in outs]
    logs = [(tmp_path / "o" / rid / "logs" / "llamacpp.log").read_text() for rid in ("a", "b")]
    # one converts; the other waited for it ("waiting for another build ...") or found it published
    assert sorted(log.count("to GGUF f32") for log in logs) == [0, 1], [log[-1500:] for log in logs]
    assert len(_gguf_entries(root)) == 1
    assert not [p for p in (root / ".tmp").glob("*") if p.is_dir()]  # no half-built entry left
