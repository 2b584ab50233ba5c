"""Bad input to the engine-facing surface (the fake engine's options, llama.cpp's native keys): one
line naming the problem and the fix, exit 2, no traceback, no results directory. Each case here
once got through: a traceback, a run that never ended, a run directory left by a refusal, or a
server started on the path "None"."""
from __future__ import annotations

import pytest

from tests.compare.cli.test_cli_bad_input import assert_one_line_error
from tests.conftest import run_cli

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
    p = run_cli("run", "--backends", f"fake@{target}", "--model", str(tiny_model), *SMALL, "--out", str(out),
                timeout=120)
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
