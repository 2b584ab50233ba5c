"""The CLI's edge, as a demanding user finds it: run ids that are paths, files that are not what
they claim, argparse's own errors, numbers out of range, lists with empty items or duplicates,
native keys an engine does not have (killed runs: test_killed_runs.py). Every bad input: one line,
exit 2, nothing written (docs/bad-input.md)."""
import json
import os

import pytest

from tests.compare.cli.test_cli_bad_input import assert_one_line_error
from tests.compare.cli.test_killed_runs import _killed_run
from tests.conftest import cli

NOT_UTF8 = b"model: /m\n# caf\xe9 \xff\n"


# ---------------------------------------------------------------- 1. a run id is a name


@pytest.mark.parametrize("rid", ["../escape", "a/b", "/abs", ".hidden", "..", "", "x" * 129, "a b", "a\nb"])
def test_run_id_that_is_not_a_name_is_refused_before_anything_is_written(tmp_path, rid):
    out = tmp_path / "root" / "results"
    p = cli("run", "--run-id", rid, "--out", str(out))
    assert_one_line_error(p, "--run-id", "see `compare run --help`")
    assert not (tmp_path / "root").exists(), "nothing may be written for a bad run id"
    assert not (tmp_path / "escape").exists()


def test_results_writer_refuses_a_run_id_that_is_a_path(tmp_path):
    from core.errors import UserError
    from core.results.io import create_results_dir

    with pytest.raises(UserError, match="--run-id '../escape'"):
        create_results_dir(tmp_path / "r", "../escape")
    assert not (tmp_path / "r").exists() and not (tmp_path / "escape").exists()
    assert create_results_dir(tmp_path / "r", "v1.2_rc-3").name == "v1.2_rc-3"


# ---------------------------------------------------------------- 2. files a user names


def _results_dir(tmp_path, run_json: bytes | None = None, requests: bytes = b""):
    d = tmp_path / "res"
    d.mkdir()
    if run_json is not None:
        (d / "run.json").write_bytes(run_json)
    (d / "requests.jsonl").write_bytes(requests)
    return d


def test_files_that_are_not_utf8_text_name_the_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(NOT_UTF8)
    out = tmp_path / "out"
    for opt in ("--spec", "--workload"):
        p = cli("run", opt, str(bad), "--out", str(out))
        assert_one_line_error(p, str(bad), "is not UTF-8 text", "line 2")
    rdir = _results_dir(tmp_path, b'{"schema_version": 2, "run_id": "x", "status": "\xff"}')
    p = cli("report", str(rdir))
    assert_one_line_error(p, str(rdir / "run.json"), "is not UTF-8")
    (tmp_path / "wl").mkdir()
    (tmp_path / "wl" / "workload.jsonl").write_bytes(b'{"request_id": "\xfe"}\n')
    p = cli("run", "--replay", str(tmp_path / "wl"), "--out", str(out))
    assert_one_line_error(p, "workload.jsonl", "is not UTF-8")
    (tmp_path / "tune.json").write_bytes(b"\xff{}")
    p = cli("run", "--backends", "hf", "--tuned", str(tmp_path / "tune.json"), "--out", str(out))
    assert_one_line_error(p, "tune.json", "is not UTF-8")
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "b1.json").write_bytes(b"\xff")
    p = cli("check", str(rdir), "--baseline", "b1", "--dir", str(tmp_path / "base"))
    assert_one_line_error(p, "b1.json", "is not UTF-8")
    assert not out.exists()


def test_sharegpt_file_that_is_not_json(tmp_path):
    bad = tmp_path / "sg.json"
    bad.write_text('[{"conversations": [}]')
    p = cli("run", "--backends", "hf", "--sharegpt", str(bad), "--out", str(tmp_path / "out"))
    assert_one_line_error(p, "ShareGPT file", str(bad), "not valid JSON at line 1")
    bad.write_bytes(b"\xff\xfe")
    p = cli("run", "--backends", "hf", "--sharegpt", str(bad), "--out", str(tmp_path / "out"))
    assert_one_line_error(p, "ShareGPT file", "not UTF-8")
    assert not (tmp_path / "out").exists()


def test_paths_that_are_directories_missing_loops_or_pipes(tmp_path):
    loop = tmp_path / "loop.yaml"
    loop.symlink_to(loop)
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    out = tmp_path / "out"
    for path, needle in ((tmp_path, "is a directory"), (loop, "symlink loop"), (tmp_path / "no.yaml", "does not exist"),
                         (fifo, "not a regular file")):
        p = cli("run", "--spec", str(path), "--out", str(out))
        assert_one_line_error(p, str(path), needle)
    p = cli("run", "--replay", str(tmp_path / "no-dir"), "--out", str(out))
    assert_one_line_error(p, "--replay", "not a directory")
    p = cli("report", str(loop))
    assert_one_line_error(p, str(loop))
    assert not out.exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file")
def test_unreadable_file(tmp_path):
    f = tmp_path / "spec.yaml"
    f.write_text("model: /m\n")
    f.chmod(0)
    p = cli("run", "--spec", str(f), "--out", str(tmp_path / "out"))
    assert_one_line_error(p, str(f), "not readable")


@pytest.mark.parametrize("content, needles", [
    (b'{"schema_version": 2, "run_id": "x", "sta', ["run.json", "not valid JSON at line 1"]),  # truncated
    (b'{"schema_version": 9, "run_id": "x", "status": "complete"}', ["schema_version 9", "re-render it"]),
    (b"[1, 2]", ["not a run.json object"]),
])
def test_results_that_are_truncated_or_from_a_newer_tool(tmp_path, content, needles):
    d = _results_dir(tmp_path, content)
    p = cli("report", str(d))
    assert_one_line_error(p, *needles)


def test_accuracy_file_not_utf8(tmp_path):
    from compare.quality.parity import load_accuracy_jsonl
    from core.errors import UserError

    f = tmp_path / "acc.jsonl"
    f.write_bytes(b'{"prompt": "\xff", "answer": "a"}\n')
    with pytest.raises(UserError, match="accuracy file .*acc.jsonl is not UTF-8"):
        load_accuracy_jsonl(f)


# ---------------------------------------------------------------- 3. argparse's own errors


@pytest.mark.parametrize("args, needles", [
    (["run", "--format", "xml"], ["--format 'xml'", "not one of table, json, md, html", "see `compare run --help`"]),
    (["run", "--warmup", "two"], ["--warmup 'two'", "not a whole number", "see `compare run --help`"]),
    (["run", "--timeout", "soon"], ["--timeout 'soon'", "not a number"]),
    (["run", "--timeout", "nan"], ["--timeout 'nan'", "finite"]),
    (["run", "--gpu-hour-price", "inf"], ["--gpu-hour-price 'inf'", "finite"]),
    (["run", "--repeats", "9" * 30], ["--repeats", "too large"]),
    (["run", "--no-such-flag"], ["unrecognized arguments: --no-such-flag", "see `compare run --help`"]),
    (["check", "R", "--alpha", "x", "--baseline", "b"], ["--alpha 'x'", "see `compare check --help`"]),
    (["report"], ["required: results", "see `compare report --help`"]),
    (["frobnicate"], ["command 'frobnicate'", "not one of run, plan"]),
])
def test_argparse_errors_are_one_line(tmp_path, args, needles):
    p = cli(*args)
    assert_one_line_error(p, *needles)
    assert "usage:" not in p.stderr


# ---------------------------------------------------------------- numbers at the edge


@pytest.mark.parametrize("args, needles", [
    (["--num-requests", "99999999999"], ["num_requests 99999999999", "more than 1,000,000"]),
    (["--workload-seed", "-1"], ["--workload-seed -1", ">= 0"]),
    (["--output-len", "600"], ["max_tokens (600)", "--max-model-len 512"]),
    (["--input-len", "100000"], ["--max-model-len 512", "--input-len"]),
    (["--max-errors", "-1"], ["--max-errors must be >= 0"]),
    (["--repeats", "0"], ["--repeats must be >= 1"]),
    (["--timeout", "-1"], ["--timeout must be > 0"]),
    (["--client-procs", "99999999"], ["--client-procs 99999999", "4 per CPU core"]),
])
def test_numbers_out_of_range_fail_before_anything_starts(tmp_path, args, needles):
    out = tmp_path / "out"
    p = cli("run", "--backends", "hf", *args, "--out", str(out))
    assert_one_line_error(p, *needles)
    assert not out.exists()


# ---------------------------------------------------------------- directories and output paths


def test_directory_options_given_a_file_a_loop_or_a_path_under_a_file(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x\n")
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    for flag, cmd in (("--out", ["run", "--backends", "hf"]), ("--cache-dir", ["cache", "ls"]),
                      ("--dir", ["check", str(tmp_path), "--baseline", "b"])):
        for path, needle in ((afile, "is a file, not a directory"), (loop, "symlink loop"),
                             (afile / "sub", "a part of its path is a file")):
            p = cli(*cmd, flag, str(path))
            assert_one_line_error(p, flag, str(path), needle)
    assert afile.read_text() == "x\n" and loop.is_symlink()


def test_report_out_that_cannot_be_written(tmp_path):
    d = _killed_run(tmp_path / "results")
    assert cli("report", str(d)).returncode == 0  # (records it as killed, with its one note)
    (tmp_path / "dir").mkdir()
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    afile = tmp_path / "afile"
    afile.write_text("x\n")
    for path, needle in ((tmp_path / "dir", "is a directory"), (loop, "symlink to nothing"),
                         (afile / "r.md", "a part of its path is a file")):
        p = cli("report", str(d), "--out", str(path))
        assert_one_line_error(p, "--out", str(path), needle)
    assert loop.is_symlink() and afile.read_text() == "x\n"


def test_baseline_name_is_a_name(tmp_path):
    d = _killed_run(tmp_path / "results")
    p = cli("baseline", "save", str(d), "--name", "../x", "--dir", str(tmp_path / "b"))
    assert_one_line_error(p, "--name '../x'", "not a path")
    assert not (tmp_path / "x").exists() and not (tmp_path / "b").exists()


# ---------------------------------------------------------------- lists: empty items and duplicates


@pytest.mark.parametrize("args, needles", [
    (["--backends", "hf,"], ["--backends 'hf,'", "empty name"]),
    (["--concurrency", "1,1"], ["c1 is given twice"]),
    (["--rate", "2,2"], ["r2 is given twice"]),
    (["--rate", "nan"], ["--rate must be > 0, got nan"]),
    (["--vary", "max_num_seqs=1,,2"], ["--vary", "empty value"]),
    (["--topology", "replicas=2,replicas=2"], ["replicas is given twice"]),
    (["--native", "hf.attn_implementation=eager", "--native", "hf.attn_implementation=sdpa"],
     ["--native hf.attn_implementation is given twice"]),
    (["--native", "nosuch.x=1"], ["--native nosuch.x", "no backend is called 'nosuch'", "compare backends"]),
])
def test_list_options_with_empty_items_or_duplicates(tmp_path, args, needles):
    out = tmp_path / "out"
    p = cli("run", *(["--backends", "hf"] if args[0] != "--backends" else []), *args, "--out", str(out))
    assert_one_line_error(p, *needles)
    assert not out.exists()


def test_native_keys_the_engine_does_not_have(tmp_path):
    """Checked against the installed frameworks (vLLM's engine arguments; transformers' loading
    keywords and the model's config) in `compare plan`, which starts nothing."""
    # each command gives a key the framework has beside one it lacks: the unknown keys are named in
    # sorted order, so a known key sorting first (attn_... < no_..., block_... < max_...) that were
    # refused would be the one named (each check imports its framework: seconds per command)
    p = cli("plan", "--backends", "hf", "--native", "hf.no_such_option=1", "--native", "hf.attn_implementation=eager")
    assert_one_line_error(p, "--native hf.no_such_option", "not a transformers")
    pytest.importorskip("vllm")
    p = cli("plan", "--backends", "vllm", "--native", "vllm.max_num_seqz=4", "--native", "vllm.block_size=16")
    assert_one_line_error(p, "--native vllm.max_num_seqz", "not a vLLM engine argument", "nearest: max_num_seqs")


def test_native_vllm_keys_of_a_container_are_the_image_s_to_judge(tmp_path):
    """vllm-container runs its image's vLLM: a key the local vLLM lacks is not refused here."""
    p = cli("plan", "--backends", "vllm-container", "--native", "vllm.no_such_flag=1")
    assert p.returncode == 0, p.stderr
    assert "no_such_flag: 1" in p.stdout  # passed to the image's server as given


@pytest.mark.parametrize("schema", [2, 3])
def test_results_written_by_a_newer_tool_say_so(tmp_path, schema):
    doc = {"schema_version": schema, "run_id": "x", "status": "complete", "a_field_from_the_future": {"x": 1},
           "hardware": {"packages": {"llm-compare": "99.0.0"}}, "backends": {"hf": {"status": "complete", "new": 1}}}
    d = _results_dir(tmp_path, json.dumps(doc).encode())
    p = cli("report", str(d))
    assert_one_line_error(p, "written by llm-compare 99.0.0, newer than this one", "upgrade")


@pytest.mark.parametrize("args, needles", [
    (["tune", "--backend", "vllm", "--slo", "ttft_p95=1s", "--trial-timeout", "0"], ["--trial-timeout", "> 0"]),
    (["tune", "--backend", "vllm", "--slo", "ttft_p95=1s", "--timeout", "-1"], ["--timeout are seconds > 0"]),
    (["calibrate", "--max-error-ms", "0"], ["--max-error-ms must be > 0"]),
    (["check", "R", "--baseline", "b", "--floor", "nan"], ["--floor 'nan'", "finite"]),
])
def test_other_commands_numbers(tmp_path, args, needles):
    p = cli(*args, cwd=tmp_path)
    assert_one_line_error(p, *needles)
    assert list(tmp_path.iterdir()) == [], "nothing written"


@pytest.mark.parametrize("cmd", [["model", "tiny"], ["bundle", "--package", "llm-compare"]])
def test_output_directories_of_other_commands(tmp_path, cmd):
    afile = tmp_path / "afile"
    afile.write_text("x\n")
    p = cli(*cmd, "--out", str(afile))
    assert_one_line_error(p, "--out", "is a file, not a directory")
    assert afile.read_text() == "x\n"
