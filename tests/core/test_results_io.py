"""The results directory as a first-class failure: created atomically and probed before any
engine starts, appended so a crash or a full disk leaves at most a torn last line (which readers
skip with a warning), and a write that fails mid-run stops the run with status "failed".

Real file systems: a small tmpfs that fills up for real, a read-only mount, /proc, a file; real
`compare run` processes against a loopback OpenAI-protocol server (tests/http_util.py)."""
from __future__ import annotations

import json
import multiprocessing
import os
import stat
import subprocess
from pathlib import Path

import pytest

from core.errors import UserError
from core.results import ResultsWriter, iter_records, load_results
from tests.conftest import cli, run_cli
from tests.http_util import ThreadedServer, openai_routes, openai_stream


def _mount_tmpfs(where: Path, options: str) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"mounting a tmpfs is refused here ({r.stderr.strip() or r.returncode}): needs root")
    return where


@pytest.fixture
def small_disk(tmp_path):
    d = _mount_tmpfs(tmp_path / "disk", "size=200k")
    yield d
    subprocess.run(["umount", str(d)], check=False)


@pytest.fixture
def read_only_disk(tmp_path):
    d = _mount_tmpfs(tmp_path / "ro", "ro,size=64k")
    yield d
    subprocess.run(["umount", str(d)], check=False)


@pytest.fixture(scope="module")
def server():
    with ThreadedServer(openai_stream(4), openai_routes()) as s:
        yield s


def _run(server, out: Path, *extra: str, n: int = 4):
    return run_cli("run", "--backends", f"openai@{server.url}", "--num-requests", str(n), "--input-len", "8",
                   "--output-len", "4", "--concurrency", "4", "--warmup", "1", "--out", str(out), *extra,
                   timeout=300)


def _one_line_error(r, code: int, needle: str) -> None:
    assert r.returncode == code, (r.returncode, r.stderr[-2000:])
    assert needle in r.stderr and "Traceback" not in r.stderr + r.stdout, r.stderr[-2000:]


def test_bad_results_directories_are_one_line_exit_2_and_nothing_is_written(tmp_path, read_only_disk):
    with ThreadedServer(openai_stream(4), openai_routes()) as server:
        _bad_dirs(server, tmp_path, read_only_disk)


def _bad_dirs(server, tmp_path, read_only_disk):
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    r = _run(server, a_file)
    _one_line_error(r, 2, "is a file, not a directory")
    assert a_file.read_text() == "x"
    r = _run(server, a_file / "below")
    _one_line_error(r, 2, "cannot be created (a part of its path is a file)")
    r = _run(server, Path("/proc/llm-compare-results"))
    _one_line_error(r, 2, "cannot create the results directory")
    r = _run(server, read_only_disk, "--run-id", "ro")
    _one_line_error(r, 2, "Read-only file system (EROFS)")
    assert list(read_only_disk.iterdir()) == []
    # no generation reached the server before the check (without --model the CLI only asks it,
    # GET /v1/models, which model it serves)
    assert not [h for h in server.raw.heads if not h.startswith(b"GET /v1/models ")], server.raw.heads


def test_a_disk_that_fills_mid_run_stops_the_run_cleanly(server, small_disk):
    r = _run(server, small_disk, "--run-id", "full", n=300)
    _one_line_error(r, 1, "No space left on device (ENOSPC)")
    d = small_disk / "full"
    run = json.loads((d / "run.json").read_text())
    assert run["status"] == "failed" and "ENOSPC" in run["error"] and "requests.jsonl" in run["error"]
    assert [b["status"] for b in run["backends"].values()] == ["failed"]
    data = (d / "requests.jsonl").read_bytes()
    assert data.endswith(b"\n") and 0 < data.count(b"\n") < 300  # some records, every line whole
    assert not (d / ".space-reserve").exists()
    # the results are readable and re-render: everything measured before the disk filled
    _, records = load_results(d)
    assert len(records) == data.count(b"\n")
    rep = cli("report", str(d))
    assert "Traceback" not in rep.stderr + rep.stdout, rep.stderr[-2000:]


def test_a_torn_last_line_is_skipped_with_a_warning_anywhere_else_it_is_an_error(server, tmp_path, capsys):
    r = _run(server, tmp_path, "--run-id", "t")
    assert r.returncode == 0, r.stderr[-2000:]
    d = tmp_path / "t"
    whole = (d / "requests.jsonl").read_bytes()
    (d / "requests.jsonl").write_bytes(whole + whole.splitlines(keepends=True)[0][:57])  # a crash mid-append
    assert len(list(iter_records(d))) == 4
    assert "skipped the torn last line" in capsys.readouterr().err
    rep = cli("report", str(d))
    assert rep.returncode == 0 and "skipped the torn last line" in rep.stderr, rep.stderr[-2000:]
    lines = whole.splitlines(keepends=True)
    (d / "requests.jsonl").write_bytes(lines[0] + lines[1][:40] + b"\n" + b"".join(lines[2:]))
    with pytest.raises(UserError, match="corrupt line"):
        load_results(d)


def test_files_get_the_same_mode_as_the_records(server, tmp_path):
    r = _run(server, tmp_path, "--run-id", "m")
    assert r.returncode == 0, r.stderr[-2000:]
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "m").iterdir() if p.is_file()}
    assert len(set(modes.values())) == 1 and modes["run.json"] == modes["requests.jsonl"], modes


def _start(root: str, barrier, results) -> None:
    barrier.wait()
    try:
        ResultsWriter(Path(root), "same", {}).finish("complete")
        results.put("won")
    except UserError as e:
        results.put(str(e))
    except BaseException as e:  # noqa: BLE001 - the test reports whatever else escaped
        results.put(f"{type(e).__name__}: {e}")


def test_twenty_simultaneous_starts_with_one_run_id(tmp_path):
    """Existence check and creation are one step: exactly one start gets the directory, each
    other gets the one-line "already exists" error."""
    ctx = multiprocessing.get_context("fork")
    barrier, results = ctx.Barrier(20), ctx.Queue()
    procs = [ctx.Process(target=_start, args=(str(tmp_path), barrier, results)) for _ in range(20)]
    for p in procs:
        p.start()
    got = [results.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(30)
    assert got.count("won") == 1, got
    assert all("already exists; pick another --run-id" in g for g in got if g != "won"), got
    assert json.loads((tmp_path / "same" / "run.json").read_text())["status"] == "complete"


def test_the_same_run_id_twice_through_the_cli(server, tmp_path):
    assert _run(server, tmp_path, "--run-id", "x").returncode == 0
    _one_line_error(_run(server, tmp_path, "--run-id", "x"), 2, "already exists; pick another --run-id")
    assert os.listdir(tmp_path) == ["x"]


def test_a_record_line_is_its_json_whichever_encoder_wrote_it():
    """requests.jsonl lines: msgspec for plain records (fast, on the measuring loop), json where
    a value may be NaN/inf (logprobs, engine metrics); either reads back as the same record."""
    import json
    import math

    from core.errors import FailureKind
    from core.records import RequestRecord
    from core.results.io import record_line

    plain = RequestRecord(request_id="r", backend="b", level="c4", t_sent_ns=10, t_ready_ns=5,
                          event_times_ns=(20, 30), event_token_counts=(1, 2), token_ids=(7, 8, 9), t_end_ns=31,
                          finish_reason="length", error_kind=FailureKind.TIMEOUT, error='a "quoted" error')
    odd = RequestRecord(request_id="s", backend="b", level="c4", t_sent_ns=1, logprobs=(-math.inf, -0.5),
                        engine_metrics={"queue_s": math.nan})
    for rec in (plain, odd):
        line = record_line(rec)
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        assert json.loads(line) == json.loads(json.dumps(rec.to_json()))
        back = RequestRecord.from_json(json.loads(line))
        assert back.event_times_ns == rec.event_times_ns and back.error_kind == rec.error_kind
    assert RequestRecord.from_json(json.loads(record_line(odd))).logprobs[0] == -math.inf


def test_archived_results_with_gzipped_records_load_and_render(server, tmp_path):
    """benchmarks/results keeps requests.jsonl gzipped: the readers take requests.jsonl.gz when
    requests.jsonl is not there."""
    import gzip

    r = _run(server, tmp_path, "--run-id", "z")
    assert r.returncode == 0, r.stderr[-2000:]
    d = tmp_path / "z"
    want = [x.request_id for x in iter_records(d)]
    (d / "requests.jsonl.gz").write_bytes(gzip.compress((d / "requests.jsonl").read_bytes()))
    (d / "requests.jsonl").unlink()
    assert [x.request_id for x in iter_records(d)] == want and len(want) == 4
    rep = cli("report", str(d))
    assert rep.returncode == 0 and "Traceback" not in rep.stderr, rep.stderr[-2000:]


def test_records_appended_together_keep_every_whole_line_when_the_disk_fills_mid_write(small_disk):
    """The runner appends the records that end in one pass of its event loop in one write: a disk
    that fills part-way through that write keeps the whole lines before it (none torn, none lost)."""
    from core.records import RequestRecord

    w = ResultsWriter(small_disk, "batch", {"levels": [], "workload": {}})
    recs = [RequestRecord(request_id=f"r{i}", backend="b", level="c1", t_sent_ns=i,
                          event_times_ns=tuple(range(10**18, 10**18 + 300)), event_token_counts=(1,) * 300,
                          token_ids=tuple(range(300)), t_end_ns=i + 1) for i in range(200)]
    w.add_records(recs[:2])
    with pytest.raises(Exception, match="ENOSPC"):
        w.add_records(recs[2:])
    w.finish("failed")
    data = (small_disk / "batch" / "requests.jsonl").read_bytes()
    assert data.endswith(b"\n") and 2 < data.count(b"\n") < 200  # more than the first write's two
    assert [r.request_id for r in iter_records(small_disk / "batch")] == [f"r{i}" for i in range(data.count(b"\n"))]
