"""The llama.cpp build's cache key and source checks, and the prebuilt-binary path (no build runs)."""
from __future__ import annotations

import os

import pytest

from backends.llamacpp import build
from backends.models.engine_cache import EngineCache, cache_key
from core.errors import UserError


def test_the_key_covers_flags_and_arch():
    cpu, cuda = build.build_fields(), build.build_fields("90")
    assert "-DGGML_CUDA=ON" in cuda["cmake_flags"] and "-DCMAKE_CUDA_ARCHITECTURES=90" in cuda["cmake_flags"]
    assert "-DLLAMA_USE_PREBUILT_UI=OFF" in cpu["cmake_flags"] and "-DGGML_CUDA=ON" not in cpu["cmake_flags"]
    assert cpu["arch"]["isa_flags_sha256"] and cuda["arch"] == {"cuda": "90"}
    assert len({cache_key(cpu), cache_key(cuda), cache_key(build.build_fields("80"))}) == 3
    assert cache_key(cpu) == cache_key(build.build_fields())  # stable


def test_a_source_that_is_not_the_pinned_one_is_refused(tmp_path, monkeypatch):
    bogus = tmp_path / build.SDIST
    bogus.write_bytes(b"not the sdist")
    monkeypatch.setenv(build.SDIST_ENV, str(bogus))
    with pytest.raises(UserError, match="is not the pinned"):
        build.converter_dir(EngineCache(tmp_path / "cache"), log=lambda s: None)
    monkeypatch.setenv(build.SDIST_ENV, str(tmp_path / "missing.tar.gz"))
    with pytest.raises(UserError, match="no such file"):
        build.converter_dir(EngineCache(tmp_path / "cache"), log=lambda s: None)


def test_a_prebuilt_server_is_used_as_is(tmp_path, monkeypatch):
    exe = tmp_path / "llama-server"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    (tmp_path / "llama-quantize").write_text("#!/bin/sh\n")
    monkeypatch.setenv(build.SERVER_ENV, str(exe))
    path, origin = build.server_binary()
    assert path == exe and build.SERVER_ENV in origin
    assert build.quantize_binary(path) == tmp_path / "llama-quantize"
    path, origin = build.server_binary(str(exe))  # the native option wins over the environment
    assert "native" in origin
    with pytest.raises(UserError, match="not an executable file"):
        build.server_binary(str(tmp_path / "nope"))
    os.chmod(exe, 0o644)
    with pytest.raises(UserError, match="not an executable file"):
        build.server_binary()


def test_a_gpu_run_builds_for_the_gpus_architecture():
    from backends.llamacpp.build import cmake_flags, parse_compute_cap

    assert parse_compute_cap("9.0") == "90" and parse_compute_cap("12.0\n") == "120"
    assert parse_compute_cap("[N/A]") is None and parse_compute_cap("") is None
    assert "-DCMAKE_CUDA_ARCHITECTURES=90" in cmake_flags(parse_compute_cap("9.0"))


def test_a_half_linked_binary_is_never_published(tmp_path):
    """What a build killed mid-link leaves in its resumable work directory: a binary cut short.
    The check before publishing runs each binary; one that does not start is refused."""
    import shutil

    whole = tmp_path / "whole"
    shutil.copy("/bin/true", whole)
    assert build._runs(whole)
    half = tmp_path / "half"
    shutil.copy("/bin/true", half)
    os.truncate(half, half.stat().st_size // 3)
    assert not build._runs(half)
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    empty.chmod(0o755)
    assert not build._runs(empty)
