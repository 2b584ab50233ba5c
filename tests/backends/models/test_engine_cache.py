"""Engine cache on the real filesystem: content-addressed keys, atomic publish, concurrent builders."""
import json
import multiprocessing as mp
import os
import signal
import time
from pathlib import Path

import pytest

from backends.models.engine_cache import (
    BuildFailed, CheckpointError, EngineCache, cache_key, checkpoint_digest, validate_checkpoint,
)


def make_ckpt(d: Path, weights: bytes = b"w" * 4096) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text('{"architectures": ["Qwen2ForCausalLM"]}')
    (d / "model.safetensors").write_bytes(weights)
    (d / "tokenizer.json").write_text("{}")
    return d


def test_digest_is_content_based(tmp_path):
    a = make_ckpt(tmp_path / "a")
    b = make_ckpt(tmp_path / "b")  # same bytes, other path
    memo = tmp_path / "memo"
    assert checkpoint_digest(a, memo) == checkpoint_digest(b, memo)
    before = checkpoint_digest(a, memo)
    # a changed checkpoint at the SAME path must miss, even with size and mtime kept
    st = (a / "model.safetensors").stat()
    (a / "model.safetensors").write_bytes(b"x" * 4096)
    os.utime(a / "model.safetensors", ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (a / "model.safetensors").stat().st_size == st.st_size
    assert checkpoint_digest(a, memo) != before
    # an added file changes it too
    after = checkpoint_digest(a, memo)
    (a / "generation_config.json").write_text("{}")
    assert checkpoint_digest(a, memo) != after


def test_digest_memo_avoids_rehash_but_detects_rewrite(tmp_path, monkeypatch):
    a = make_ckpt(tmp_path / "a")
    memo = tmp_path / "memo"
    checkpoint_digest(a, memo)
    import backends.models.engine_cache as ec

    calls = []
    real = ec.file_sha256
    monkeypatch.setattr(ec, "file_sha256", lambda p: calls.append(p.name) or real(p))
    checkpoint_digest(a, memo)
    assert calls == []  # nothing re-read
    (a / "tokenizer.json").write_text('{"v": 2}')
    checkpoint_digest(a, memo)
    assert calls == ["tokenizer.json"]


@pytest.mark.parametrize("breakage,match", [
    ("no_dir", "is not a directory"), ("no_config", "no config.json"), ("no_weights", "no weight files"),
    ("missing_shard", "missing 1 shard"),
])
def test_missing_checkpoint_files_are_named(tmp_path, breakage, match):
    d = make_ckpt(tmp_path / "m")
    if breakage == "no_dir":
        d = tmp_path / "nope"
    elif breakage == "no_config":
        (d / "config.json").unlink()
    elif breakage == "no_weights":
        (d / "model.safetensors").unlink()
    else:
        (d / "model.safetensors.index.json").write_text(json.dumps(
            {"weight_map": {"a": "model.safetensors", "b": "model-00002-of-00002.safetensors"}}))
    with pytest.raises(CheckpointError, match=match):
        validate_checkpoint(d)


def test_key_is_canonical():
    assert cache_key({"a": 1, "b": [1, 2]}) == cache_key({"b": [1, 2], "a": 1})
    assert cache_key({"a": 1}) != cache_key({"a": 2})


def test_publish_then_hit(tmp_path):
    cache = EngineCache(tmp_path / "c")
    built = []

    def build(d: Path):
        built.append(d)
        (d / "engine").mkdir()
        (d / "engine" / "rank0.engine").write_bytes(b"E" * 100)

    e, hit = cache.get_or_build("k1", {"model": "/m"}, build)
    assert not hit and e.path == tmp_path / "c" / "k1" and (e.path / "engine" / "rank0.engine").exists()
    assert e.meta["model"] == "/m" and e.meta["key"] == "k1"
    e2, hit2 = cache.get_or_build("k1", {}, build)
    assert hit2 and e2.path == e.path and len(built) == 1
    assert [x.key for x in cache.entries()] == ["k1"]
    assert e.size_bytes() >= 100


def test_failed_build_publishes_nothing(tmp_path):
    cache = EngineCache(tmp_path / "c")

    def build(d: Path):
        (d / "half.engine").write_bytes(b"half")
        raise BuildFailed("trtllm-build exited with 1", "line1\nOOM")

    with pytest.raises(BuildFailed, match="OOM"):
        cache.get_or_build("k", {}, build)
    assert cache.get("k") is None and cache.entries() == []
    assert list((tmp_path / "c" / ".tmp").iterdir()) == []


def _builder_proc(root, key, delay, log, q):
    cache = EngineCache(root)

    def build(d: Path):
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(delay)
        (d / "artifact").write_text(str(os.getpid()))

    e, hit = cache.get_or_build(key, {}, build)
    q.put((hit, (e.path / "artifact").read_text()))


def test_concurrent_builders_build_once(tmp_path):
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    log = tmp_path / "builds.log"
    procs = [ctx.Process(target=_builder_proc, args=(tmp_path / "c", "same", 0.5, log, q)) for _ in range(4)]
    for p in procs:
        p.start()
    results = [q.get(timeout=30) for _ in procs]
    for p in procs:
        p.join(10)
    assert len(log.read_text().split()) == 1  # exactly one builder ran
    assert sorted(hit for hit, _ in results) == [False, True, True, True]
    assert len({artifact for _, artifact in results}) == 1  # everyone got the same published entry


def _killed_builder(root, started):
    # killed as a process with no handler of its own: a SIGTERM handler some earlier test left in
    # this forked worker must not decide how it dies
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    cache = EngineCache(root)

    def build(d: Path):
        (d / "partial").write_text("x")
        started.set()
        time.sleep(60)

    cache.get_or_build("k", {}, build)


def test_builder_killed_mid_build_leaves_no_entry_and_lock_is_freed(tmp_path):
    ctx = mp.get_context("fork")
    started = ctx.Event()
    p = ctx.Process(target=_killed_builder, args=(tmp_path / "c", started))
    p.start()
    assert started.wait(20)
    os.kill(p.pid, signal.SIGKILL)
    p.join(10)
    cache = EngineCache(tmp_path / "c")
    assert cache.get("k") is None
    assert len(list((tmp_path / "c" / ".tmp").iterdir())) == 1  # the dead builder's temp dir
    e, hit = cache.get_or_build("k", {}, lambda d: (d / "ok").write_text("1"), lock_timeout_s=5)
    assert not hit and (e.path / "ok").exists()
    assert list((tmp_path / "c" / ".tmp").iterdir()) == []  # swept


def test_remove_and_read_only_trees(tmp_path):
    cache = EngineCache(tmp_path / "c")

    def build(d: Path):
        (d / "sub").mkdir()
        (d / "sub" / "f").write_text("x")
        os.chmod(d / "sub", 0o500)  # some tools write read-only trees

    e, _ = cache.get_or_build("abc123", {}, build)
    cache.remove("abc123")
    assert not e.path.exists() and cache.entries() == []


# ---------------------------------------------------------------- damaged entries, interrupted and concurrent builds


def _binary_build(d: Path):
    (d / "bin").mkdir()
    (d / "bin" / "server").write_bytes(b"\x7fELF" + b"x" * 4096)
    (d / "build.log").write_text("ok\n")


@pytest.mark.parametrize("damage", ["truncated", "missing_file", "missing_meta", "meta_not_json", "rewritten"])
def test_a_damaged_entry_is_detected_by_its_digest_and_rebuilt(tmp_path, damage):
    cache = EngineCache(tmp_path / "c")
    e, hit = cache.get_or_build("k", {}, _binary_build)
    assert not hit and e.meta["content_sha256"]
    server = e.path / "bin" / "server"
    if damage == "truncated":  # (the size changes: seen without re-reading the file)
        os.truncate(server, 100)
    elif damage == "missing_file":
        server.unlink()
    elif damage == "missing_meta":
        (e.path / "meta.json").unlink()
    elif damage == "meta_not_json":
        (e.path / "meta.json").write_text("{half")
    else:  # same size, same mtime: only the content differs (ctime moves, so it is re-hashed)
        st = server.stat()
        server.write_bytes(b"\x7fELF" + b"y" * 4096)
        os.utime(server, ns=(st.st_atime_ns, st.st_mtime_ns))
    said, built = [], []
    e2, hit2 = cache.get_or_build("k", {}, lambda d: built.append(1) or _binary_build(d), log=said.append)
    assert not hit2 and built == [1], "a damaged entry is rebuilt, never used"
    assert (e2.path / "bin" / "server").stat().st_size == 4100
    assert len(said) == 1 and "engine cache entry k is damaged" in said[0] and "building it again" in said[0]
    # the rebuilt entry is whole: the next look is a hit that builds nothing and says nothing
    said.clear()
    assert cache.get_or_build("k", {}, lambda d: built.append(2), log=said.append)[1] and built == [1] and not said
    assert [p.name for p in (tmp_path / "c" / ".tmp").iterdir()] == []


def test_a_hit_does_not_rehash_unchanged_files(tmp_path, monkeypatch):
    cache = EngineCache(tmp_path / "c")
    cache.get_or_build("k", {}, _binary_build)
    import backends.models.engine_cache as ec

    calls = []
    real = ec.file_sha256
    monkeypatch.setattr(ec, "file_sha256", lambda p: calls.append(p.name) or real(p))
    assert cache.get_or_build("k", {}, _binary_build)[1]
    assert calls == []


def test_an_entry_without_a_recorded_digest_is_used_as_it_is(tmp_path):
    """Entries published before digests were recorded stay usable (a rebuild may take minutes)."""
    cache = EngineCache(tmp_path / "c")
    e, _ = cache.get_or_build("k", {}, _binary_build)
    meta = json.loads((e.path / "meta.json").read_text())
    del meta["content_sha256"]
    (e.path / "meta.json").write_text(json.dumps(meta))
    assert cache.get_or_build("k", {}, lambda d: pytest.fail("rebuilt"))[1]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_an_interrupted_build_publishes_nothing_and_the_next_run_builds(tmp_path, sig):
    ctx = mp.get_context("fork")
    started = ctx.Event()
    p = ctx.Process(target=_killed_builder, args=(tmp_path / "c", started))
    p.start()
    assert started.wait(20)
    os.kill(p.pid, sig)
    p.join(10)
    assert p.exitcode == -sig
    cache = EngineCache(tmp_path / "c")
    assert cache.get("k") is None and not (tmp_path / "c" / "k").exists()
    e, hit = cache.get_or_build("k", {}, _binary_build, lock_timeout_s=5)
    assert not hit and not (e.path / "partial").exists()  # (the half-built file never reaches an entry)
    assert list((tmp_path / "c" / ".tmp").iterdir()) == []


def _waiting_builder(root, key, q):
    said = []
    e, hit = EngineCache(root).get_or_build(key, {}, _binary_build, log=said.append)
    q.put((hit, said))


def test_a_second_builder_waits_and_says_so(tmp_path):
    ctx = mp.get_context("fork")
    started, q = ctx.Event(), ctx.Queue()
    first = ctx.Process(target=_killed_builder, args=(tmp_path / "c", started))  # holds the lock 60 s
    first.start()
    assert started.wait(20)
    second = ctx.Process(target=_waiting_builder, args=(tmp_path / "c", "k", q))
    second.start()
    deadline = time.monotonic() + 20
    lock = tmp_path / "c" / ".locks" / "k.lock"
    while time.monotonic() < deadline and lock.read_text().strip() != str(first.pid):
        time.sleep(0.05)
    time.sleep(1.0)  # (the second is waiting on the lock now)
    assert second.is_alive()
    os.kill(first.pid, signal.SIGKILL)  # the first dies: the second takes over and builds
    hit, said = q.get(timeout=30)
    second.join(10)
    first.join(10)
    assert not hit
    assert len(said) == 1 and said[0].startswith("waiting for another build of engine cache entry k") \
        and f"(process {first.pid})" in said[0]
