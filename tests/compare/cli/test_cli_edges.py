"""The CLI's edge, as a demanding user finds it: run ids that are paths, files that are not what
they claim, argparse's own errors, numbers that are not numbers, runs killed outright, runs that
failed before they started. Every bad input: one line, exit 2, nothing written (docs/bad-input.md)."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.compare.cli.test_cli_bad_input import assert_one_line_error
from tests.conftest import ROOT, run_cli

NOT_UTF8 = b"model: /m\n# caf\xe9 \xff\n"


# ---------------------------------------------------------------- 1. a run id is a name


@pytest.mark.parametrize("rid", ["../escape", "a/b", "/abs", ".hidden", "..", "", "x" * 129, "a b", "a\nb"])
def test_run_id_that_is_not_a_name_is_refused_before_anything_is_written(tmp_path, rid):
    out = tmp_path / "root" / "results"
    p = run_cli("run", "--run-id", rid, "--out", str(out))
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
        p = run_cli("run", opt, str(bad), "--out", str(out))
        assert_one_line_error(p, str(bad), "is not UTF-8 text", "line 2")
    rdir = _results_dir(tmp_path, b'{"schema_version": 2, "run_id": "x", "status": "\xff"}')
    p = run_cli("report", str(rdir))
    assert_one_line_error(p, str(rdir / "run.json"), "is not UTF-8")
    (tmp_path / "wl").mkdir()
    (tmp_path / "wl" / "workload.jsonl").write_bytes(b'{"request_id": "\xfe"}\n')
    p = run_cli("run", "--replay", str(tmp_path / "wl"), "--out", str(out))
    assert_one_line_error(p, "workload.jsonl", "is not UTF-8")
    (tmp_path / "tune.json").write_bytes(b"\xff{}")
    p = run_cli("run", "--backends", "hf", "--tuned", str(tmp_path / "tune.json"), "--out", str(out))
    assert_one_line_error(p, "tune.json", "is not UTF-8")
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "b1.json").write_bytes(b"\xff")
    p = run_cli("check", str(rdir), "--baseline", "b1", "--dir", str(tmp_path / "base"))
    assert_one_line_error(p, "b1.json", "is not UTF-8")
    assert not out.exists()


def test_sharegpt_file_that_is_not_json(tmp_path):
    bad = tmp_path / "sg.json"
    bad.write_text('[{"conversations": [}]')
    p = run_cli("run", "--backends", "hf", "--sharegpt", str(bad), "--out", str(tmp_path / "out"))
    assert_one_line_error(p, "ShareGPT file", str(bad), "not valid JSON at line 1")
    bad.write_bytes(b"\xff\xfe")
    p = run_cli("run", "--backends", "hf", "--sharegpt", str(bad), "--out", str(tmp_path / "out"))
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
        p = run_cli("run", "--spec", str(path), "--out", str(out), timeout=60)
        assert_one_line_error(p, str(path), needle)
    p = run_cli("run", "--replay", str(tmp_path / "no-dir"), "--out", str(out))
    assert_one_line_error(p, "--replay", "not a directory")
    p = run_cli("report", str(loop))
    assert_one_line_error(p, str(loop))
    assert not out.exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file")
def test_unreadable_file(tmp_path):
    f = tmp_path / "spec.yaml"
    f.write_text("model: /m\n")
    f.chmod(0)
    p = run_cli("run", "--spec", str(f), "--out", str(tmp_path / "out"))
    assert_one_line_error(p, str(f), "not readable")


@pytest.mark.parametrize("content, needles", [
    (b'{"schema_version": 2, "run_id": "x", "sta', ["run.json", "not valid JSON at line 1"]),  # truncated
    (b'{"schema_version": 9, "run_id": "x", "status": "complete"}', ["schema_version 9", "re-render it"]),
    (b"[1, 2]", ["not a run.json object"]),
])
def test_results_that_are_truncated_or_from_a_newer_tool(tmp_path, content, needles):
    d = _results_dir(tmp_path, content)
    p = run_cli("report", str(d))
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
    p = run_cli(*args)
    assert_one_line_error(p, *needles)
    assert "usage:" not in p.stderr


# ---------------------------------------------------------------- 4. a run killed outright

# A real process writes a run and is SIGKILLed mid-level, as the OOM killer would: three of four
# requests of level c1 recorded, run.json still "running". No engine is needed to test the record.
KILLED_CHILD = r"""
import os, signal, sys
from pathlib import Path
from core.records import RequestRecord
from core.results.io import ResultsWriter
w = ResultsWriter(Path(sys.argv[1]), sys.argv[2], {
    "levels": [{"kind": "concurrency", "value": 1, "label": "c1"}, {"kind": "concurrency", "value": 2, "label": "c2"}],
    "workload": {"num_requests": 4}})
w.backend("hf")["status"] = "running"
w.flush()
t = 10**9
for i in range(3):
    s = t + i * 10**8
    w.add_record(RequestRecord(request_id=f"r{i}", backend="hf", level="c1", t_sent_ns=s,
                               event_times_ns=(s + 10**7, s + 2 * 10**7), event_token_counts=(1, 1),
                               t_end_ns=s + 2 * 10**7, finish_reason="length", requested_tokens=2, prompt_tokens=4))
os.kill(os.getpid(), signal.SIGKILL)
"""


def _killed_run(root, rid="k1"):
    p = subprocess.run([sys.executable, "-c", KILLED_CHILD, str(root), rid], cwd=ROOT, capture_output=True,
                       timeout=120)
    assert p.returncode == -signal.SIGKILL, p.stderr
    d = root / rid
    run = json.loads((d / "run.json").read_text())
    assert run["status"] == "running" and run["owner"]["pid"] > 0 and run["owner"]["start_ticks"] is not None
    return d


@pytest.mark.parametrize("command", ["report", "check", "clean", "run"])
def test_killed_run_is_recorded_as_killed_by_the_next_command(tmp_path, command):
    root = tmp_path / "results"
    d = _killed_run(root)
    if command == "report":
        p = run_cli("report", str(d))
        assert p.returncode == 0, p.stderr
        assert "(killed)" in p.stdout
    elif command == "check":
        (tmp_path / "b").mkdir()
        run_cli("check", str(d), "--baseline", "none", "--dir", str(tmp_path / "b"))  # refused: no baseline
    elif command == "clean":
        p = run_cli("clean", "--dry-run", "--out", str(root))
        assert "would record run k1" in p.stdout, p.stdout
        assert json.loads((d / "run.json").read_text())["status"] == "running"  # a dry run changes nothing
        p = run_cli("clean", "--out", str(root))
        assert "run k1" in p.stdout and "recorded as killed" in p.stdout, p.stdout
    else:  # a new run in the same results root; this one asks for the killed run's id: still taken
        p = run_cli("run", "--backends", "hf", "--out", str(root), "--run-id", "k1")
        assert p.returncode == 2 and "already exists" in p.stderr and "Traceback" not in p.stderr
        assert "note: run k1" in p.stderr and "recorded as killed" in p.stderr
    run = json.loads((d / "run.json").read_text())
    assert run["status"] == "killed", run
    assert "SIGKILL" in run["error"] and "3 requests kept" in run["error"]
    hf = run["backends"]["hf"]
    assert hf["status"] == "killed" and "in level c1" in hf["error"]
    c1 = hf["levels"]["c1"]
    assert c1["requests"] == 3 and c1["ok"] == 3 and c1["aborted"].startswith("killed: 3 of 4 requests")
    assert abs(c1["ttft_ms"]["p50"] - 10.0) < 1e-6
    assert "c2" not in hf["levels"]
    assert not [p for p in d.iterdir() if p.name.startswith(".")], "the reserve and temp files are gone"


def test_live_or_unknown_owner_is_left_running(tmp_path):
    from compare.cli.killed import settle
    from core.results.io import ResultsWriter
    from core.results.owner import owner_alive

    w = ResultsWriter(tmp_path, "live", {})  # this process: alive
    assert owner_alive(w.run["owner"]) is True
    assert settle(w.dir) is None
    # the same pid with another start time is a reused pid: gone
    assert owner_alive({**w.run["owner"], "start_ticks": w.run["owner"]["start_ticks"] - 1}) is False
    assert owner_alive({**w.run["owner"], "boot_id": "another-boot"}) is False
    assert owner_alive({**w.run["owner"], "host": "another-host"}) is None  # cannot tell from here
    assert owner_alive(None) is None  # written before owners were recorded
    w.finish("complete")


@pytest.mark.engine
def test_sigkilled_real_run_is_recorded_as_killed(tmp_path, tiny_model):
    """The transformers backend on the tiny model, SIGKILLed once it has recorded a request."""
    root = tmp_path / "results"
    argv = [sys.executable, "-m", "compare.cli", "run", "--backends", "hf", "--model", str(tiny_model),
            "--num-requests", "40", "--input-len", "16", "--output-len", "32", "--concurrency", "1",
            "--warmup", "0", "--out", str(root), "--run-id", "k", "-q"]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    reqs = root / "k" / "requests.jsonl"
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            if reqs.exists() and reqs.read_bytes().count(b"\n") >= 2:
                break
            time.sleep(0.2)
        assert proc.poll() is None, "the run ended before it could be killed"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=60)
    assert json.loads((root / "k" / "run.json").read_text())["status"] == "running"
    p = run_cli("report", str(root / "k"))
    assert p.returncode == 0, p.stderr
    run = json.loads((root / "k" / "run.json").read_text())
    assert run["status"] == "killed" and run["backends"]["hf"]["status"] == "killed"
    kept = run["backends"]["hf"]["levels"]["c1"]
    assert kept["requests"] >= 2 and kept["aborted"].startswith("killed:")


# ---------------------------------------------------------------- 5. a run that failed before it started


def test_run_id_of_a_run_that_never_started_can_be_used_again(tmp_path):
    pytest.importorskip("ray")
    out = tmp_path / "r"
    env = {"RAY_ADDRESS": ""}
    for _ in range(2):  # no cluster: fails at start both times, never "already exists"
        p = run_cli("run", "--backends", "hf", "--ray", "auto", "--run-id", "same", "--out", str(out), env=env)
        assert p.returncode == 2, p.stderr
        assert "cannot join the Ray cluster" in p.stderr and "already exists" not in p.stderr
    assert json.loads((out / "same" / "run.json").read_text())["status"] == "failed"
    assert [x.name for x in out.iterdir()] == ["same"], "the replaced attempt is gone"


def test_run_id_with_measurements_is_never_reused(tmp_path):
    from core.errors import UserError
    from core.results.io import check_results_dir_free, create_results_dir

    d = _killed_run(tmp_path)  # measured 3 requests, then killed
    for _ in range(2):
        with pytest.raises(UserError, match="already exists"):
            check_results_dir_free(tmp_path, "k1")
        with pytest.raises(UserError, match="already exists"):
            create_results_dir(tmp_path, "k1")
    assert (d / "requests.jsonl").stat().st_size > 0


# ---------------------------------------------------------------- numbers at the edge


@pytest.mark.parametrize("args, needles", [
    (["--num-requests", "99999999999"], ["num_requests 99999999999", "more than 1,000,000"]),
    (["--workload-seed", "-1"], ["--workload-seed -1", ">= 0"]),
    (["--output-len", "600"], ["max_tokens (600)", "--max-model-len 512"]),
    (["--input-len", "100000"], ["--max-model-len 512", "--input-len"]),
    (["--max-errors", "-1"], ["--max-errors must be >= 0"]),
    (["--repeats", "0"], ["--repeats must be >= 1"]),
    (["--timeout", "-1"], ["--timeout must be > 0"]),
])
def test_numbers_out_of_range_fail_before_anything_starts(tmp_path, args, needles):
    out = tmp_path / "out"
    p = run_cli("run", "--backends", "hf", *args, "--out", str(out))
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
            p = run_cli(*cmd, flag, str(path))
            assert_one_line_error(p, flag, str(path), needle)
    assert afile.read_text() == "x\n" and loop.is_symlink()


def test_report_out_that_cannot_be_written(tmp_path):
    d = _killed_run(tmp_path / "results")
    assert run_cli("report", str(d)).returncode == 0  # (records it as killed, with its one note)
    (tmp_path / "dir").mkdir()
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    afile = tmp_path / "afile"
    afile.write_text("x\n")
    for path, needle in ((tmp_path / "dir", "is a directory"), (loop, "symlink to nothing"),
                         (afile / "r.md", "a part of its path is a file")):
        p = run_cli("report", str(d), "--out", str(path))
        assert_one_line_error(p, "--out", str(path), needle)
    assert loop.is_symlink() and afile.read_text() == "x\n"


def test_baseline_name_is_a_name(tmp_path):
    d = _killed_run(tmp_path / "results")
    p = run_cli("baseline", "save", str(d), "--name", "../x", "--dir", str(tmp_path / "b"))
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
    p = run_cli("run", *(["--backends", "hf"] if args[0] != "--backends" else []), *args, "--out", str(out))
    assert_one_line_error(p, *needles)
    assert not out.exists()


def test_native_keys_the_engine_does_not_have(tmp_path):
    """Checked against the installed frameworks (vLLM's engine arguments; transformers' loading
    keywords and the model's config) in `compare plan`, which starts nothing."""
    p = run_cli("plan", "--backends", "hf", "--native", "hf.no_such_option=1")
    assert_one_line_error(p, "--native hf.no_such_option", "not a transformers")
    p = run_cli("plan", "--backends", "hf", "--native", "hf.attn_implementation=eager")
    assert p.returncode == 0, p.stderr
    pytest.importorskip("vllm")
    p = run_cli("plan", "--backends", "vllm", "--native", "vllm.max_num_seqz=4")
    assert_one_line_error(p, "--native vllm.max_num_seqz", "not a vLLM engine argument", "nearest: max_num_seqs")
    p = run_cli("plan", "--backends", "vllm", "--native", "vllm.scheduling_policy=priority")
    assert p.returncode == 0, p.stderr


def test_native_vllm_keys_of_a_container_are_the_image_s_to_judge(tmp_path):
    """vllm-container runs its image's vLLM: a key the local vLLM lacks is not refused here."""
    p = run_cli("plan", "--backends", "vllm-container", "--native", "vllm.no_such_flag=1")
    assert p.returncode == 0, p.stderr
    assert "no_such_flag: 1" in p.stdout  # passed to the image's server as given


@pytest.mark.parametrize("schema", [2, 3])
def test_results_written_by_a_newer_tool_say_so(tmp_path, schema):
    doc = {"schema_version": schema, "run_id": "x", "status": "complete", "a_field_from_the_future": {"x": 1},
           "hardware": {"packages": {"llm-compare": "99.0.0"}}, "backends": {"hf": {"status": "complete", "new": 1}}}
    d = _results_dir(tmp_path, json.dumps(doc).encode())
    p = run_cli("report", str(d))
    assert_one_line_error(p, "written by llm-compare 99.0.0, newer than this one", "upgrade")


@pytest.mark.parametrize("args, needles", [
    (["tune", "--backend", "vllm", "--slo", "ttft_p95=1s", "--trial-timeout", "0"], ["--trial-timeout", "> 0"]),
    (["tune", "--backend", "vllm", "--slo", "ttft_p95=1s", "--timeout", "-1"], ["--timeout are seconds > 0"]),
    (["calibrate", "--max-error-ms", "0"], ["--max-error-ms must be > 0"]),
    (["check", "R", "--baseline", "b", "--floor", "nan"], ["--floor 'nan'", "finite"]),
])
def test_other_commands_numbers(tmp_path, args, needles):
    p = run_cli(*args, cwd=tmp_path)
    assert_one_line_error(p, *needles)
    assert list(tmp_path.iterdir()) == [], "nothing written"
