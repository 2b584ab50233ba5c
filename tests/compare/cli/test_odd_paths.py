"""Paths that are no regular file where `compare` reads a file: a device, a FIFO, a symlink loop, a
directory, a huge file. One line, exit 2, nothing written, and never a hang (a FIFO is never opened
for a blocking read)."""
import os
import shutil

import pytest

from tests.compare.cli.test_cli_bad_input import assert_one_line_error
from tests.compare.cli.test_file_shapes import _refused, good_run  # noqa: F401 (a fixture)
from tests.conftest import cli, run_cli

# the commands run in this process (tests/conftest.py cli): a read that blocked on a FIFO would hang the
# test, so each test has a short limit of its own
pytestmark = pytest.mark.timeout(120)


def _odd_path(tmp_path, kind):
    if kind == "device":
        return "/dev/zero"
    p = tmp_path / f"odd-{kind}"
    if kind == "fifo":
        os.mkfifo(p)
    elif kind == "loop":
        os.symlink(tmp_path / "odd-loop2", p)
        os.symlink(p, tmp_path / "odd-loop2")
    elif kind == "directory":
        p.mkdir()
    elif kind == "huge":  # (sparse: its size says 2 GiB, none of it is on disk; refused from its size)
        with open(p, "wb") as f:
            f.truncate(2 << 30)
    return str(p)


_WHY = {"device": "is not a regular file (a pipe or device)", "fifo": "is not a regular file (a pipe or device)",
        "loop": "is a symlink loop", "directory": "is a directory, not a file", "huge": "is too large (2.0 GiB"}


@pytest.mark.parametrize("kind", list(_WHY))
@pytest.mark.parametrize("option", ["--workload", "--spec", "--trace", "--dataset", "--sharegpt", "--replay"])
def test_a_path_that_is_no_regular_file(tmp_path, kind, option):
    if option == "--replay" and kind in ("directory", "loop", "device"):
        pytest.skip("--replay takes a directory: its workload.jsonl is the file")
    path = _odd_path(tmp_path, kind)
    if option == "--replay":  # a results directory whose workload.jsonl is the odd file
        d = tmp_path / "r"
        d.mkdir()
        os.symlink(path, d / "workload.jsonl")
        arg = str(d)
    else:
        arg = path
    if option in ("--workload", "--spec") and kind == "huge":
        why = "is too large (2.0 GiB; at most 16.0 MiB"
    else:
        why = _WHY[kind]
    _refused(tmp_path, "run", "--backends", "fake", option, arg, needles=[why])


@pytest.mark.parametrize("kind", ["device", "fifo", "huge"])
@pytest.mark.parametrize("name", ["run.json", "requests.jsonl"])
def test_a_results_file_that_is_no_regular_file(tmp_path, good_run, kind, name):  # noqa: F811
    d = tmp_path / "damaged"
    shutil.copytree(good_run, d)
    (d / name).unlink()
    odd = _odd_path(tmp_path, kind)
    os.symlink(odd, d / name) if kind == "device" else os.replace(odd, d / name)
    p = cli("report", str(d))
    if kind == "huge" and name == "requests.jsonl":  # (streamed, as a run's records may be large: a line is bounded)
        assert_one_line_error(p, f"{d}/requests.jsonl has a corrupt line", "line 1 is longer than 64 MiB")
    else:
        assert_one_line_error(p, f"results file {d}/{name}", _WHY[kind])
    assert sorted(os.listdir(d)) == sorted(os.listdir(good_run))


def test_a_fifo_run_json_in_the_results_root_does_not_stop_other_commands(tmp_path, good_run):  # noqa: F811
    """`compare run` and `compare clean` look at every run in the results root (was it killed?);
    a run.json that is a FIFO is passed over, not waited on."""
    root = tmp_path / "root"
    shutil.copytree(good_run, root / "odd")
    (root / "odd" / "run.json").unlink()
    os.mkfifo(root / "odd" / "run.json")
    p = run_cli("run", "--backends", "fake", "--num-requests", "2", "--concurrency", "1", "--out", str(root),
                "--run-id", "next", "--quiet", timeout=120)
    assert p.returncode == 0, p.stderr
    p = cli("run", "--backends", "fake", "--out", str(root), "--run-id", "odd")
    assert_one_line_error(p, "already exists")
    for args in (("--dry-run",), ()):
        p = cli("clean", "--out", str(root), *args)
        assert p.returncode == 0, p.stderr
    assert sorted(os.listdir(root)) == ["next", "odd"]


@pytest.mark.parametrize("kind", ["device", "fifo", "loop", "directory"])
def test_a_tune_or_baseline_file_that_is_no_regular_file(tmp_path, good_run, kind):  # noqa: F811
    tune = tmp_path / "tune"
    tune.mkdir()
    os.symlink(_odd_path(tmp_path, kind), tune / "tune.json")
    _refused(tmp_path, "run", "--backends", "fake", "--tuned", str(tune), needles=["--tuned file", _WHY[kind]])
    bl = tmp_path / "bl"
    bl.mkdir()
    os.symlink(_odd_path(tmp_path / "bl", kind) if kind != "device" else "/dev/zero", bl / "b.json")
    _refused(tmp_path, "check", str(good_run), "--baseline", "b", "--dir", str(bl), needles=["baseline", _WHY[kind]])
