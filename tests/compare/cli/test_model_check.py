"""A `--model` that is no checkpoint, and a GGUF given to llama.cpp that is no GGUF, are refused in
one line before any engine starts or anything is written (the engines used to start, write the
run directory and fail minutes later with their own traceback)."""
from __future__ import annotations

import pytest

from compare.cli.model_check import GGUF_MAGIC
from tests.conftest import cli, run_cli

# the commands run in this process (tests/conftest.py cli): a model path that is a pipe must be refused,
# never opened for a blocking read, or the test hangs: a short limit of its own
pytestmark = pytest.mark.timeout(120)


def _refused(r, out, *needles):
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    for n in needles:
        assert n in r.stderr, r.stderr
    assert not out.exists()


@pytest.mark.parametrize("make, needles", [
    (lambda d: d.mkdir(), ["has no config.json", "not a model checkpoint"]),
    (lambda d: (d.mkdir(), (d / "config.json").write_text('{"hidden_size": ')), ["is not valid JSON at line 1"]),
    (lambda d: (d.mkdir(), (d / "config.json").write_text("[1, 2]")), ["is a JSON list, not an object"]),
    (lambda d: (d.mkdir(), (d / "config.json").mkdir()), ["is a directory, not a file"]),
    (lambda d: d.write_text("not a model"), ["is a file, not a model directory", "pass a model checkpoint directory"]),
    (lambda d: d.write_bytes(GGUF_MAGIC + b"\x03\x00\x00\x00"), ["is a file, not a model directory",
                                                                "--native llamacpp.gguf=FILE"]),
], ids=["empty-dir", "config-not-json", "config-a-list", "config-a-dir", "a-file", "a-gguf-file"])
@pytest.mark.parametrize("backends", ["vllm", "llamacpp"])
def test_a_model_that_is_no_checkpoint_is_refused_before_anything_starts(tmp_path, make, needles, backends):
    model, out = tmp_path / "m", tmp_path / "out"
    make(model)
    _refused(cli("run", "--backends", backends, "--model", str(model), "--out", str(out)), out, *needles)


def test_a_device_or_a_pipe_as_model_is_refused_without_reading_it(tmp_path):
    import os

    fifo, out = tmp_path / "fifo", tmp_path / "out"
    os.mkfifo(fifo)  # opening it to read would wait for a writer forever
    for model in ("/dev/zero", str(fifo)):
        _refused(cli("run", "--backends", "vllm", "--model", model, "--out", str(out)), out,
                 "is not a directory (a device or pipe)")


@pytest.mark.parametrize("content, needle", [
    (b"PK\x03\x04 a zip", "is not a GGUF file"),
    (None, "does not exist"),
])
def test_a_gguf_served_as_is_must_be_a_gguf(tmp_path, tiny_model, content, needle):
    gguf, out = tmp_path / "x.gguf", tmp_path / "out"
    if content is not None:
        gguf.write_bytes(content)
    # a subprocess: the check runs `llama-server --help`, which the test process's engine guard refuses
    r = run_cli("run", "--backends", "llamacpp", "--model", str(tiny_model), "--native", f"llamacpp.gguf={gguf}",
                "--out", str(out))
    _refused(r, out, "--native llamacpp.gguf", needle)
