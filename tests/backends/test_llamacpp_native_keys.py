"""`--native llamacpp.--FLAG` is checked against the flags the real llama-server lists in its
--help (read from the build in the engine cache): an unknown flag is refused in one line, with the
nearest names, before the server starts or anything is written; a real one runs."""
from __future__ import annotations

import json

import pytest

from backends.llamacpp.native import checked_keys, help_flags
from tests.conftest import TINY_SPEC_ARGS, run_cli

pytestmark = pytest.mark.engine  # runs the built llama-server (its --help, then one short run)


def test_help_columns_not_descriptions():
    text = ("-t,    --threads N                      number of threads (default: -1)\n"
            "                                        (env: LLAMA_ARG_THREADS) see also --not-a-flag\n"
            "--repack, -nr, --no-repack              whether to repack weights (default: --x)\n")
    assert help_flags(text) == {"-t", "--threads", "--repack", "-nr", "--no-repack"}


def test_unknown_flag_is_refused_and_a_real_one_runs(tiny_model, tmp_path):
    label, keys = checked_keys(str(tiny_model), {})
    assert keys is not None and {"--threads", "--ctx-size", "--parallel", "server_bin", "gguf"} <= keys, label
    out = tmp_path / "out"
    r = run_cli("run", "--backends", "llamacpp", "--model", str(tiny_model), "--native", "llamacpp.--thread=1",
                "--out", str(out))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr[-2000:]
    assert "--native llamacpp.--thread: not a flag of this llama-server" in r.stderr and "--threads" in r.stderr
    assert not out.exists()
    r = run_cli("run", "--backends", "llamacpp", "--model", str(tiny_model), *TINY_SPEC_ARGS,
                "--native", "llamacpp.--threads=1", "--num-requests", "2", "--concurrency", "1",
                "--input-len", "8", "--output-len", "4", "--out", str(out), "--run-id", "ok")
    assert r.returncode == 0, r.stderr[-2000:]
    argv = json.loads((out / "ok" / "run.json").read_text())["backends"]["llamacpp"]["describe"]["native_config"]
    assert "--threads" in json.dumps(argv)


def test_a_value_the_server_refuses_is_reported_with_its_own_words(tiny_model, tmp_path):
    """A real flag, a value llama-server refuses: the server exits at start, and the backend's error
    leads with the server's error line (the log's last lines are only its usage)."""
    r = run_cli("run", "--backends", "llamacpp", "--model", str(tiny_model), *TINY_SPEC_ARGS, "--native",
                "llamacpp.--threads=two", "--num-requests", "1", "--concurrency", "1", "--output-len", "4",
                "--warmup", "0", "--quality", "off", "--out", str(tmp_path), "--run-id", "v", timeout=600)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    b = json.loads((tmp_path / "v" / "run.json").read_text())["backends"]["llamacpp"]
    assert b["status"] == "failed" and 'error while handling argument "--threads"' in b["error"], b["error"]
