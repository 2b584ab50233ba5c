"""Files of the right syntax but the wrong shape, and paths that are no file: every file `compare`
reads is refused in one line naming the file (and line), the field, the value and what is allowed;
exit 2; no traceback; no results directory."""
import json
import os
import shutil

import pytest

from tests.compare.cli.test_cli_bad_input import assert_one_line_error
from tests.conftest import cli, run_cli

_FAKE = ("--backends", "fake", "--num-requests", "2", "--concurrency", "1")


@pytest.fixture(scope="module")
def good_run(tmp_path_factory):
    """One complete run of the fake backend: the template of the damaged results directories."""
    root = tmp_path_factory.mktemp("good")
    p = run_cli("run", *_FAKE, "--out", str(root), "--run-id", "good", "--quiet")
    assert p.returncode == 0, p.stderr
    return root / "good"


def _refused(tmp_path, *args, needles):
    out = tmp_path / "results"
    p = cli(*args, "--out", str(out)) if args[0] == "run" else cli(*args)
    assert_one_line_error(p, *needles)
    assert not out.exists(), "nothing may be written for bad input"
    return p


@pytest.mark.parametrize("text, needles", [
    ("num_requests: [1, 2]\n", ["line 1", "num_requests [1, 2] (a list)", "valid integer"]),
    ('num_requests: "many"\n', ["line 1", 'num_requests "many" (a string)', "valid integer"]),
    ("name: x\nnum_requests: -3\n", ["line 2", "num_requests -3", "greater than 0"]),
    ("num_requestz: 3\n", ["line 1", "num_requestz: not a known field", "did you mean num_requests?"]),
    ("- a\n- b\n", ['the document is ["a", "b"], not a mapping of field: value']),
    ("input: [1, 2]\n", ["input [1, 2] (a list)", "a mapping of LengthDist fields"]),
    ("name: x\ninput:\n  dist: fixed\n  value: -5\n", ["line 4", "input.value -5", "greater than 0"]),
    ("input: {dist: fixed, valu: 3}\n", ["input.valu: not a known field", "did you mean value?"]),
    ("sessions: 3\n", ["sessions 3 (a number)", "SessionsSpec"]),
    ("seed: -1\n", ["seed -1", "greater than or equal to 0"]),
    ("input: {dist: normal, mean: .inf, std: 1}\n", ["input.mean Infinity", "finite number"]),
    ("sessions: {num_sessions: 1, think_time_s: .nan}\n", ["sessions.think_time_s NaN", "finite number"]),
    ("sessions: {num_sessions: 1, think_time_s: 1.0e+300}\n", ["sessions.think_time_s 1e+300", "less than or equal "
                                                                "to 3600"]),
    ("input: {dist: fixed, value: 1000000000}\n", ["input.value 1000000000", "less than or equal to 1048576"]),
    ("token_id_range: [50, 10]\n", ["token_id_range must be [low, high) with 0 <= low < high"]),  # (the model's check)
    ("input: {dist: uniform, min: 9, max: 3}\n", ["line 1: input", "uniform length: min must be <= max"]),
])
def test_workload_file_of_the_wrong_shape(tmp_path, text, needles):
    f = tmp_path / "w.yaml"
    f.write_text(text)
    _refused(tmp_path, "run", "--backends", "fake", "--workload", str(f), needles=[f"workload file {f}", *needles])


@pytest.mark.parametrize("text, needles", [
    ('model: /m\nmax_num_seqs: "four"\n', ["line 2", 'max_num_seqs "four" (a string)', "valid integer"]),
    ("model: /m\nmax_num_seqs: -4\n", ["line 2", "max_num_seqs -4", "greater than 0"]),
    ("model: [1]\n", ["line 1", "model [1] (a list)", "valid string"]),
    ("model: /m\nnative: [1, 2]\n", ["line 2", "native [1, 2]", "mapping of backend"]),
    ("model: /m\nnative:\n  vllm: [1]\n", ["line 3", "native.vllm [1]", "mapping of option -> value"]),
    ("- model\n", ["not a mapping of field: value"]),
])
def test_spec_file_of_the_wrong_shape(tmp_path, text, needles):
    f = tmp_path / "s.yaml"
    f.write_text(text)
    _refused(tmp_path, "run", "--backends", "fake", "--spec", str(f), needles=[f"spec file {f}", *needles])


def test_a_flag_is_named_as_the_flag(tmp_path):
    _refused(tmp_path, "run", "--backends", "fake", "--max-num-seqs", "x", needles=['--max-num-seqs: max_num_seqs "x"'])
    _refused(tmp_path, "run", "--backends", "fake", "--seed", "-3", needles=["--seed: seed -3", "greater than or equal"])


@pytest.mark.parametrize("args, needles", [
    # (once silently clipped to 1M tokens)
    (["--input-len", "2000000"], ["--input-len: input.value 2000000", "less than or equal to 1048576"]),
    (["--input-len", "1000000", "--num-requests", "1000"], ["up to 1,000 requests of up to 1,000,000 prompt tokens",
                                                            "built in memory before the run"]),
])
def test_a_workload_too_large_to_build_is_refused_before_it_is_built(tmp_path, args, needles):
    _refused(tmp_path, "run", "--backends", "fake", *args, needles=needles)


def test_sessions_too_many_to_build(tmp_path):
    f = tmp_path / "w.yaml"
    f.write_text("sessions: {num_sessions: 100000000, turns: {dist: fixed, value: 1000}}\n")
    _refused(tmp_path, "run", "--backends", "fake", "--workload", str(f),
             needles=["sessions.num_sessions 100000000 x up to 1000 turns is more than 1,000,000 requests"])


@pytest.mark.parametrize("line, needles", [
    ('{"request_id": 5, "max_tokens": 2, "prompt_token_ids": [1]}', ["request_id 5 (a number): should be a string"]),
    ('{"request_id": "a", "max_tokens": "2", "prompt_token_ids": [1]}', ['max_tokens "2" (a string)', "whole number"]),
    ('{"request_id": "a", "max_tokens": 2, "prompt_token_ids": ["x"]}', ["prompt_token_ids", "a list, each a whole"]),
    ('{"request_id": "a", "max_tokens": -2, "prompt_token_ids": [1]}', ["max_tokens -2: should be > 0"]),
    ('{"request_id": "a", "max_tokens": 2, "prompt_token_ids": [1], "zzz": 1}', ["zzz: not a known field"]),
    ('{"request_id": "a", "max_tokens": 2, "messages": [["user", 5]]}', ["messages", "[a string, a string]"]),
    ("[1]", ["[1] is a list, not an object of GenerationRequest fields"]),
    ('{"request_id": "a", "max_tokens": 2, "prompt_token_ids": [1]}\n{"request_id": "a", "max_tokens": 2, '
     '"prompt_token_ids": [2]}', ["line 3: request_id 'a' is given twice (also line 2)"]),
])
def test_replay_workload_of_the_wrong_shape(tmp_path, good_run, line, needles):
    d = tmp_path / "damaged"
    shutil.copytree(good_run, d)
    (d / "workload.jsonl").write_text("\n" + line + "\n")  # (line 2: blank lines are counted)
    _refused(tmp_path, "run", "--backends", "fake", "--replay", str(d),
             needles=[f"--replay file {d}/workload.jsonl line {3 if 'twice' in needles[0] else 2}", *needles])


@pytest.mark.parametrize("field, value, needles", [
    ("levels", {"a": 1}, ['levels {"a": 1} (a mapping)', "valid list"]),
    ("repeats", "two", ['repeats "two" (a string)', "valid integer"]),
    ("backends", [1, 2], ["backends [1, 2] (a list)", "valid dictionary"]),
])
def test_run_json_of_the_wrong_shape(tmp_path, good_run, field, value, needles):
    d = tmp_path / "damaged"
    shutil.copytree(good_run, d)
    doc = json.loads((d / "run.json").read_text())
    (d / "run.json").write_text(json.dumps({**doc, field: value}))
    before = sorted(os.listdir(d))
    _refused(tmp_path, "report", str(d), needles=[f"{d}/run.json", *needles])
    assert sorted(os.listdir(d)) == before  # (no report written into it)


@pytest.mark.parametrize("change, needles", [
    ({"t_sent_ns": "x"}, ['line 2: t_sent_ns "x" (a string): should be a whole number']),
    ({"event_times_ns": 5}, ["line 2: event_times_ns 5 (a number): should be a list, each a whole number"]),
    ({"token_ids": [True]}, ["line 2: token_ids [true] (a list)"]),
    ({"zzz": 1}, ["line 2: zzz: not a known field (allowed: request_id, backend"]),
    ([1], ["line 2: [1] is a list, not an object of RequestRecord fields"]),
])
def test_requests_jsonl_of_the_wrong_shape(tmp_path, good_run, change, needles):
    d = tmp_path / "damaged"
    shutil.copytree(good_run, d)
    lines = (d / "requests.jsonl").read_text().splitlines()
    lines[1] = json.dumps({**json.loads(lines[1]), **change} if isinstance(change, dict) else change)
    (d / "requests.jsonl").write_text("\n".join(lines) + "\n")
    _refused(tmp_path, "report", str(d), needles=[f"{d}/requests.jsonl has a corrupt line", *needles])


def test_records_with_measured_infinities_are_read(tmp_path, good_run):
    """A logprob of -inf (and NaN from an engine) is a measured value, not damage."""
    d = tmp_path / "lp"
    shutil.copytree(good_run, d)
    lines = (d / "requests.jsonl").read_text().splitlines()
    lines[0] = json.dumps({**json.loads(lines[0]), "logprobs": [float("-inf"), float("nan")]})
    (d / "requests.jsonl").write_text("\n".join(lines) + "\n")
    p = cli("report", str(d))
    assert p.returncode == 0, p.stderr


@pytest.mark.parametrize("field, value, needles", [
    ("metrics", [1], ["metrics [1] (a list)", "valid dictionary"]),
    ("repeats", -1, ["repeats -1"]),
    ("zzz", 1, ["zzz: not a known field", "allowed: format, version"]),
])
def test_baseline_of_the_wrong_shape(tmp_path, good_run, field, value, needles):
    bl = tmp_path / "bl"
    p = cli("baseline", "save", str(good_run), "--name", "b", "--dir", str(bl))
    assert p.returncode == 0, p.stderr
    doc = json.loads((bl / "b.json").read_text())
    (bl / "b.json").write_text(json.dumps({**doc, field: value}))
    _refused(tmp_path, "check", str(good_run), "--baseline", "b", "--dir", str(bl),
             needles=[f"baseline b ({bl}/b.json)", *needles])


def test_tune_file_of_the_wrong_shape(tmp_path):
    d = tmp_path / "tune"
    d.mkdir()
    (d / "tune.json").write_text(json.dumps({"backends": {"a": 1}}))
    _refused(tmp_path, "run", "--backends", "fake", "--tuned", str(d), needles=[f"--tuned file {d}/tune.json"])


@pytest.mark.parametrize("text, needles", [
    ('{"timestamp": "nan", "input_length": 3, "output_length": 2}\n', [':1: timestamp "nan"', "finite number"]),
    ('{"timestamp": 1, "input_length": [3], "output_length": 2}\n', [":1: input_length [3]", "whole number >= 0"]),
    ('{"timestamp": 1, "input_length": -3, "output_length": 2}\n', [":1: input_length -3", "whole number >= 0"]),
    ('{"timestamp": 1, "input_length": 3, "output_length": 2, "extra": 1}\n', [":1: 'extra' is not a Mooncake field"]),
    ('{"timestamp": 1, "input_length": 3, "output_length": 2, "hash_ids": "ab"}\n', ['hash_ids "ab"', "whole numbers"]),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\ninf,3,4\n", [":2: TIMESTAMP 'inf'", "finite seconds"]),
])
def test_trace_of_the_wrong_shape(tmp_path, text, needles):
    f = tmp_path / ("t.csv" if text.startswith("TIMESTAMP") else "t.jsonl")
    f.write_text(text)
    _refused(tmp_path, "run", "--backends", "fake", "--trace", str(f), needles=[str(f), *needles])


@pytest.mark.parametrize("text, needles", [
    ('{"prompt": ["a"]}\n', [":1:", "must be non-empty text"]),
    ('{"prompt": "a", "output_len": "many"}\n', [":1:", "'many' is not a whole number >= 1"]),
    ('{"token_ids": [true, 2]}\n', [":1:", "non-empty list of token ids"]),
    ('{"messages": {"role": "user"}}\n', [":1:", "non-empty list of"]),
    ("[1, 2]\n", [":1: not a JSON object"]),
])
def test_dataset_of_the_wrong_shape(tmp_path, text, needles):
    f = tmp_path / "p.jsonl"
    f.write_text(text)
    _refused(tmp_path, "run", "--backends", "fake", "--dataset", str(f), needles=[str(f), *needles])
