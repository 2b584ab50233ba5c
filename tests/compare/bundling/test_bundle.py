"""compare bundle: real wheels from PyPI, real pip, real install.sh, real fatbins from nvcc."""
from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from compare.bundling.build import Platform, pip_downloader, read_package_list, resolve
from compare.bundling.prune import KIND_ELF, elf_section, import_sites, parse_fatbin, prune_fatbin
from tests.conftest import run_cli

HTTPX = "httpx==0.28.1"  # small pure-Python tree: httpcore, h11, anyio, certifi, idna (+ typing-extensions < 3.13)


@pytest.fixture(scope="module")
def wheel_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("wheels")


def _resolve(cache: Path, python: str, have: str = "", skip: dict | None = None, root: str = HTTPX):
    t = Platform(python=python)
    return resolve(root, t, read_package_list(have), skip or {}, cache, pip_downloader(t))


def test_resolve_uses_target_package_list(wheel_cache):
    p = _resolve(wheel_cache, "3.12", have="certifi\nidna==3.10  # on the target\n")
    assert {"httpx", "httpcore", "h11", "anyio"} <= set(p.wheels)
    assert {"certifi", "idna"} <= set(p.on_target) and "idna" not in p.wheels
    assert p.required_by["h11"] == ["httpcore"]


@pytest.mark.parametrize("python,expect", [("3.10", {"exceptiongroup", "typing-extensions"}),
                                           ("3.12", {"typing-extensions"}), ("3.13", set())])
def test_resolve_evaluates_markers_for_the_target_python(wheel_cache, python, expect):
    # anyio 4.9.0: exceptiongroup if python < 3.11, typing_extensions if python < 3.13
    p = _resolve(wheel_cache, python, have="idna\nsniffio\n", root="anyio==4.9.0")
    assert set(p.wheels) == {"anyio"} | expect


def test_resolve_bundles_too_old_target_packages_and_honours_skips(wheel_cache):
    p = _resolve(wheel_cache, "3.12", have="certifi\nidna==1.0\n", skip={"h11": "not on the path"})
    assert "idna" in p.wheels  # the target's idna 1.0 does not satisfy anyio's idna>=2.8
    assert p.skipped == {"h11": "not on the path"} and "h11" not in p.wheels


def _wheel(d: Path, name: str, version: str, requires: list[str]) -> None:
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(d / f"{name}-{version}-py3-none-any.whl", "w") as z:
        z.writestr(f"{name}-{version}.dist-info/METADATA", meta)


def test_resolve_backtracks_past_a_release_that_conflicts_with_a_pin(tmp_path):
    """The shape of vLLM 0.26's real conflict: root pins ffi==1.0, the newest grammar needs ffi>=1.1."""
    index = tmp_path / "index"
    index.mkdir()
    _wheel(index, "root", "1.0", ["ffi==1.0", "grammar>=0.1"])
    _wheel(index, "ffi", "1.0", [])
    _wheel(index, "ffi", "1.1", [])
    _wheel(index, "grammar", "0.3", ["ffi>=1.1"])
    _wheel(index, "grammar", "0.2", ["ffi>=1.0"])
    from packaging.requirements import Requirement
    from packaging.utils import parse_wheel_filename

    def local_download(reqs: list[str], dest: Path) -> None:  # newest matching file, like pip
        for text in reqs:
            r = Requirement(text)
            found = sorted((parse_wheel_filename(w.name)[1], w) for w in index.glob(f"{r.name}-*.whl")
                           if r.specifier.contains(parse_wheel_filename(w.name)[1]))
            if not found:
                raise RuntimeError(f"no match for {text}")
            (dest / found[-1][1].name).write_bytes(found[-1][1].read_bytes())

    plan = resolve("root==1.0", Platform(), {}, {}, tmp_path / "dl", local_download)
    assert {k: v.name.split("-")[1] for k, v in plan.wheels.items()} == {"root": "1.0", "ffi": "1.0", "grammar": "0.2"}


def test_bundle_cli_round_trip_through_install_sh(tmp_path):
    out = tmp_path / "bundle"
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    r = run_cli("bundle", "--out", str(out), "--package", HTTPX, "--python", py, "--part-size-mib", "0.1",
                "--cache", str(tmp_path / "cache"), timeout=300)
    assert r.returncode == 0, r.stderr
    parts = sorted(out.glob("bundle.part*"))
    assert len(parts) >= 2 and all(p.stat().st_size <= int(0.1 * (1 << 20)) for p in parts)
    dest = tmp_path / "site"
    inst = subprocess.run(["sh", str(out / "install.sh"), str(dest)], capture_output=True, text=True, timeout=120)
    assert inst.returncode == 0, inst.stderr
    code = "import httpx, httpcore, h11, anyio; print(httpx.__version__, httpx.__file__)"
    ok = subprocess.run([sys.executable, "-S", "-c", f"import sys; sys.path.insert(0, {str(dest)!r}); {code}"],
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("0.28.1 ") and str(dest) in ok.stdout
    # a damaged part is refused before anything is extracted
    parts[0].write_bytes(b"x" + parts[0].read_bytes()[1:])
    bad = subprocess.run(["sh", str(out / "install.sh"), str(tmp_path / "site2")], capture_output=True, text=True)
    assert bad.returncode == 2 and "checksum mismatch" in bad.stderr
    assert not (tmp_path / "site2").exists()


def test_bundle_cli_bad_input(tmp_path):
    r = run_cli("bundle", "--out", str(tmp_path / "o"), "--package", "not a requirement!!")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--package" in r.stderr
    r = run_cli("bundle", "--out", str(tmp_path / "o"), "--python", "3")
    assert r.returncode == 2 and "major.minor" in r.stderr
    r = run_cli("bundle", "--out", str(tmp_path / "o"), "--package", HTTPX, "--profile", "vllm-dense-sm90")
    assert r.returncode == 2 and "not httpx" in r.stderr


def test_import_sites_classifies_guarded_lazy_and_module_level(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("try:\n    from . import _ext\nexcept ImportError:\n    _ext = None\n")
    (pkg / "b.py").write_text("import contextlib\nwith contextlib.suppress(ImportError):\n    import pkg._ext\n")
    (pkg / "c.py").write_text("def f():\n    import pkg._ext.sub\n    return 1\n")
    (pkg / "d.py").write_text("from pkg import _ext\n")
    (pkg / "e.py").write_text("import os\nif os.environ.get('X'):\n    from pkg._ext import y\n")
    kinds = {s.file: s.kind for s in import_sites(tmp_path, "pkg._ext")}
    assert kinds == {"pkg/a.py": "guarded", "pkg/b.py": "guarded", "pkg/c.py": "lazy", "pkg/d.py": "module-level",
                     "pkg/e.py": "conditional"}


KERNEL = "__global__ void k{n}(float *x) {{ int i = threadIdx.x; {body} }}\n"


@pytest.mark.skipif(not Path("/usr/local/bin/nvcc").exists() and not __import__("shutil").which("nvcc"),
                    reason="nvcc (CUDA toolkit) not installed: cannot build a real fatbin")
def test_prune_fatbin_keeps_sm90_cubins_byte_identical(tmp_path):
    import shutil

    nvcc = shutil.which("nvcc") or "/usr/local/bin/nvcc"
    objs = []
    for n, body in ((1, "x[i] += 1.0f;"), (2, "for (int j = 0; j < 64; ++j) x[i] = x[i] * 1.0001f + j;")):
        (tmp_path / f"k{n}.cu").write_text(KERNEL.format(n=n, body=body))
        objs.append(tmp_path / f"k{n}.o")
        subprocess.run([nvcc, "-c", "-Xcompiler", "-fPIC", "-gencode", "arch=compute_80,code=sm_80",
                        "-gencode", "arch=compute_90,code=[sm_90,compute_90]", str(tmp_path / f"k{n}.cu"),
                        "-o", str(objs[-1])], check=True, capture_output=True, timeout=300)
    so = tmp_path / "libk.so"
    subprocess.run([nvcc, "-shared", *map(str, objs), "-o", str(so)], check=True, capture_output=True, timeout=300)

    def entries(path: Path):
        data = path.read_bytes()
        return data, [e for c in parse_fatbin(data, *elf_section(data, ".nv_fatbin")) for e in c]

    before, eb = entries(so)
    stats = prune_fatbin(so, tmp_path / "pruned.so", 90)
    after, ea = entries(tmp_path / "pruned.so")
    assert len(after) == len(before) and len(ea) == len(eb)
    assert stats["pruned_entries"] >= 1  # the larger sm_80 cubin now carries the smaller one
    for x, y in zip(eb, ea):
        if x.kind == KIND_ELF and x.arch == 90:
            assert before[x.payload] == after[y.payload]
        if x.kind == KIND_ELF and x.arch == 80:  # its own cubin or the smallest sm_80 one, zero-padded
            got = after[y.payload]
            assert any(got == before[z.payload][:z.stored_bytes].ljust(y.size, b"\0")
                       for z in eb if z.kind == KIND_ELF and z.arch == 80)
