"""Bad input at the limits: the fake engine's options, llama.cpp's native keys, requests of a size
no engine serves (a replayed, dataset or trace request). One line naming the problem and the fix,
exit 2, no traceback, no results directory. Each case here once got through: a traceback, a run
that never ended, a run directory left by a refusal, or a server started on the path "None"."""
from __future__ import annotations

import json

import pytest

from tests.compare.cli.test_cli_bad_input import assert_one_line_error
from tests.conftest import cli, run_cli

SMALL = ("--num-requests", "2", "--concurrency", "1", "--output-len", "4", "--warmup", "0", "--quality", "off")


@pytest.mark.parametrize("target, needles", [
    ("stall_frac=nan", ["stall_frac='nan'", "a number from 0 to 1"]),  # was taken: NaN compares false
    ("fail=nan", ["fail='nan'", "a number from 0 to 1"]),
    ("batch=inf", ["batch='inf'", "a number from 0 to 1000"]),  # was a traceback (NaN to integer)
    ("batch=1e300", ["batch='1e300'", "a number from 0 to 1000"]),
    ("ttft=99999999999999999999999s", ["at most 1 hour"]),  # was a run that never ended
    ("stall=7200s", ["stall='7200s'", "at most 1 hour"]),
])
def test_fake_engine_options_out_of_range(tmp_path, tiny_model, target, needles):
    out = tmp_path / "r"
    p = cli("run", "--backends", f"fake@{target}", "--model", str(tiny_model), *SMALL, "--out", str(out))
    assert_one_line_error(p, *needles)
    assert not out.exists()


@pytest.mark.parametrize("native, needles", [
    # an empty value was served as the path "None" (the server died at start, exit 1)
    ("llamacpp.gguf=", ["native gguf=", "it names no file", "llamacpp.gguf=/path/to/model.gguf"]),
    ("llamacpp.server_bin=", ["native server_bin=", "it names no file"]),
    # refused at the engine's start, after the run directory was written
    ("llamacpp.server_bin=/no/such/llama-server", ["server_bin=/no/such/llama-server", "not an executable file"]),
    ("llamacpp.server_bin=/tmp", ["server_bin=/tmp", "not an executable file"]),
    # an executable that is not llama-server: it started, and died, as the server
    ("llamacpp.server_bin=/bin/true", ["server_bin=/bin/true", "does not answer --help as llama-server"]),
])
def test_llamacpp_native_values_that_name_no_server_or_gguf(tmp_path, tiny_model, native, needles):
    out = tmp_path / "r"
    p = run_cli("run", "--backends", "llamacpp", "--model", str(tiny_model), "--native", native, *SMALL,
                "--out", str(out), timeout=120)
    assert_one_line_error(p, *needles)
    assert not out.exists()


def _replay_dir(tmp_path, **change):
    """A results directory whose workload.jsonl holds one request, with ``change`` applied."""
    row = {"request_id": "r0", "max_tokens": 4, "ignore_eos": True, "temperature": 0.0, "top_p": 1.0, "seed": 0,
           "logprobs": None, "prompt_token_ids": [5, 6, 7], **change}
    d = tmp_path / "earlier"
    d.mkdir()
    (d / "workload.jsonl").write_text(json.dumps(row) + "\n")
    return ["--replay", str(d)]


@pytest.mark.parametrize("make, needles", [
    # a replayed request asking 10**9 tokens ran for ever (nothing bounds --replay's lengths but this)
    (lambda t: _replay_dir(t, max_tokens=10**9), ["line 1", "max_tokens 1000000000", "at most 1048576"]),
    (lambda t: _replay_dir(t, prompt_token_ids=[5, -5]), ["line 1", "prompt token id -5", "from 0 to 2147483647"]),
    (lambda t: _replay_dir(t, prompt_token_ids=[2**40]), ["prompt token id 1099511627776"]),
    # a trace line's input_length was built in memory as a prompt of that many tokens
    (lambda t: ["--trace", _write(t / "t.jsonl", '{"timestamp": 0, "input_length": 1000000000, '
                                  '"output_length": 4, "hash_ids": [1]}\n')], ["t.jsonl:1", "input_length",
                                                                               "at most 1048576 tokens"]),
    (lambda t: ["--trace", _write(t / "t.jsonl", '{"timestamp": 0, "input_length": 8, '
                                  '"output_length": 1000000000, "hash_ids": [1]}\n')], ["output_length"]),
    (lambda t: ["--trace", _write(t / "a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n0,10,99999999999\n")],
     ["a.csv:2", "GeneratedTokens 99999999999", "at most 1048576"]),
    (lambda t: ["--dataset", _write(t / "d.jsonl", '{"prompt": "hi", "output_len": 1000000000}\n')],
     ["d.jsonl:1", "output_len 1000000000", "<= 1048576"]),  # was a traceback
])
def test_requests_of_a_size_no_engine_serves(tmp_path, tiny_model, make, needles):
    out = tmp_path / "r"
    p = cli("run", "--backends", "fake", "--model", str(tiny_model), *SMALL, *make(tmp_path), "--out", str(out))
    assert_one_line_error(p, *needles)
    assert not out.exists()


def _write(path, text):
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("backend, spec, needles", [
    # a NUL in a file's value: a traceback (embedded null byte) after the run directory was written
    ("llamacpp", 'native: {llamacpp: {"--threads": "2\\u0000"}}', ["native --threads='2\\x00'", "one value"]),
    ("llamacpp", 'native: {llamacpp: {gguf: "/tmp/\\u0000x"}}', ["llamacpp.gguf /tmp/\\x00x", "NUL character"]),
    # a list or a mapping was passed to llama-server as the text "[1, 2]" (it died at start, exit 1)
    ("llamacpp", 'native: {llamacpp: {"--threads": [1, 2]}}', ["native --threads=[1, 2]", "one value"]),
    ("llamacpp", 'native: {llamacpp: {"--threads": {a: 1}}}', ["native --threads={'a': 1}"]),
    # a name quoted in the message is shown escaped: a NUL or newline never reaches the terminal
    ("fake", 'native: {"fake\\u0000": {ttft: 1}}', ["--native fake\\x00.ttft", "no backend is called"]),
    ("fake", 'native: {fake: {"tt\\nft": 1}}', ["unknown fake engine option(s) tt\\nft"]),
])
def test_spec_values_no_engine_can_take(tmp_path, tiny_model, backend, spec, needles):
    out = tmp_path / "r"
    # llama.cpp's checks probe `llama-server --help` first: a process of its own (tests/conftest.py cli)
    run = run_cli if backend == "llamacpp" else cli
    p = run("run", "--backends", backend, "--model", str(tiny_model), *SMALL,
            "--spec", _write(tmp_path / "s.yaml", spec + "\n"), "--out", str(out))
    assert_one_line_error(p, *needles)
    assert "\0" not in p.stderr
    assert not out.exists()


@pytest.mark.parametrize("name, needles", [
    ("x" * 5_000_000, ["name \"xxxx", "at most 128 characters"]),  # each request id began with 5 MB
    ("", ["name \"\"", "at least 1 character"]),
])
def test_a_workload_name_at_the_limits(tmp_path, tiny_model, name, needles):
    out = tmp_path / "r"
    w = _write(tmp_path / "w.yaml", f"name: \"{name}\"\nnum_requests: 2\n")
    p = cli("run", "--backends", "fake", "--model", str(tiny_model), *SMALL, "--workload", w, "--out", str(out))
    assert_one_line_error(p, *needles)
    assert not out.exists()


def _tune_dir(tmp_path, best_config):
    """A tune.json of the fake engine whose best config is ``best_config`` (edited by hand, or of
    another version)."""
    d = tmp_path / "tune"
    d.mkdir()
    doc = {"schema": "llm-compare-tune/1", "budget": 2, "status": "complete",
           "load_search": {"kind": "concurrency", "start": 1, "tol": 0.1, "max_probes": 3, "repeats": 1,
                           "max_load": 8, "warmup": 0, "timeout_s": 60, "seed": 0},
           "backends": [{"backend": "fake", "best": {"config": best_config}}]}
    (d / "tune.json").write_text(json.dumps(doc))
    return str(d)


@pytest.mark.parametrize("config, needles", [  # each was a traceback (KeyError, pydantic's ValidationError)
    ({"max_num_seqz": 4}, ["sets 'max_num_seqz', not a knob of fake (knobs: max_num_seqs)"]),
    ({"max_num_seqs": "many"}, ["does not make a valid spec", "max_num_seqs \"many\""]),
    ({"max_num_seqs": -4}, ["max_num_seqs -4", "greater than 0"]),
])
def test_a_tuned_config_no_spec_can_take(tmp_path, tiny_model, config, needles):
    out = tmp_path / "r"
    p = cli("run", "--backends", "fake", "--model", str(tiny_model), *SMALL, "--tuned", _tune_dir(tmp_path, config),
            "--out", str(out))
    assert_one_line_error(p, "--tuned file", *needles)
    assert not out.exists()


def test_requests_per_stream_with_a_trace(tmp_path, tiny_model):
    """A trace is sent open-loop at its own clock: --requests-per-stream did nothing, silently
    (with --rate it is refused the same way)."""
    out = tmp_path / "r"
    trace = _write(tmp_path / "t.jsonl", '{"timestamp": 0, "input_length": 8, "output_length": 4, "hash_ids": [1]}\n')
    p = cli("run", "--backends", "fake", "--model", str(tiny_model), "--num-requests", "2", "--warmup", "0",
            "--quality", "off", "--requests-per-stream", "2", "--trace", trace, "--out", str(out))
    assert_one_line_error(p, "--requests-per-stream sizes closed-loop levels", "open-loop")
    assert not out.exists()


def test_a_backend_name_longer_than_a_file_name(tmp_path, tiny_model):
    """Its engine log is a file named after it: a 330-character fake@... name was ENAMETOOLONG, a
    traceback after the run directory was written. The run completes; the log's name is cut and
    made unique with a digest of the name."""
    name = "fake@ttft=5ms+itl=1ms+prefill=" + "0" * 300 + "1ms"
    out = tmp_path / "r"
    p = run_cli("run", "--backends", name, "--model", str(tiny_model), *SMALL, "--out", str(out), "--run-id", "a",
                timeout=120)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr[-2000:]
    run = json.loads((out / "a" / "run.json").read_text())
    assert run["backends"][name]["status"] == "complete"
    [log] = (out / "a" / "logs").glob("fake_ttft=5ms*.log")
    assert len(log.name.encode()) <= 255
