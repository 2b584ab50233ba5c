"""Pruning an installed tree for one GPU architecture, with the source as the evidence.

Two tools, both refusing rather than guessing:
- ``import_sites(tree, module)``: every static import of a module in the tree's Python files,
  classified by ``ast`` as ``guarded`` (inside ``try: ... except ImportError`` or
  ``with contextlib.suppress(ImportError)``), ``lazy`` (inside a function: runs only on the code
  path that calls it), ``conditional`` (under a module-level ``if``, e.g. an availability probe;
  listed in the manifest) or ``module-level`` (runs on import). A file is only removed when none of
  its import sites is module-level and unguarded, unless the importing module is itself only
  imported that way (followed a few levels).
- ``prune_fatbin(src, dst, arch)``: in an ELF's ``.nv_fatbin`` section, every cubin that cannot
  run on ``sm_<arch>`` (another major; the driver never loads it) is replaced by the smallest
  valid cubin of the same kind/arch in the same file, so each entry still decodes and the file
  keeps its size and layout; cubins that can run are byte-identical; PTX is kept where a kernel
  has no runnable cubin (the driver JIT-compiles it). The result compresses far better.
"""
from __future__ import annotations

import ast
import os
import struct
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

FATBIN_MAGIC = 0xBA55ED50
KIND_PTX, KIND_ELF = 1, 2
_COMPRESSED = 0xA000  # entry flag bits for LZ4/zstd-compressed payloads


# ---------------------------------------------------------------- import evidence

@dataclass(frozen=True)
class ImportSite:
    file: str
    line: int
    kind: str  # guarded | lazy | conditional | module-level


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    names = []
    t = handler.type
    for n in (t.elts if isinstance(t, ast.Tuple) else [t]) if t is not None else []:
        names.append(n.id if isinstance(n, ast.Name) else getattr(n, "attr", ""))
    return t is None or any(n in ("ImportError", "ModuleNotFoundError", "Exception", "BaseException") for n in names)


def _suppresses_import_error(item: ast.withitem) -> bool:
    c = item.context_expr
    if not isinstance(c, ast.Call):
        return False
    fn = c.func.attr if isinstance(c.func, ast.Attribute) else getattr(c.func, "id", "")
    return fn == "suppress" and any(getattr(a, "id", "") in ("ImportError", "ModuleNotFoundError", "Exception")
                                    for a in c.args)


def _imports(node: ast.AST, pkg: str) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom):
        if node.level:  # relative: resolve against the file's package
            base = pkg.rsplit(".", node.level - 1)[0] if node.level > 1 else pkg
            mod = f"{base}.{node.module}" if node.module else base
        else:
            mod = node.module or ""
        return [mod] + [f"{mod}.{a.name}" for a in node.names]
    return []


def import_sites(tree: Path, module: str) -> list[ImportSite]:
    """Static imports of ``module`` (or its submodules) in every .py file under ``tree``."""
    out: list[ImportSite] = []
    for path in sorted(Path(tree).rglob("*.py")):
        try:
            src = path.read_text(encoding="utf-8", errors="replace")
            if module.rsplit(".", 1)[-1] not in src:
                continue
            root = ast.parse(src)
        except (SyntaxError, ValueError):
            continue
        rel = path.relative_to(tree)
        pkg = ".".join(rel.with_suffix("").parts[:-1] if rel.name != "__init__.py" else rel.parts[:-1])

        def visit(node: ast.AST, guarded: bool, lazy: bool, cond: bool = False) -> None:
            for mod in _imports(node, pkg):
                if mod == module or mod.startswith(module + "."):
                    kind = ("guarded" if guarded else "lazy" if lazy else "conditional" if cond
                            else "module-level")
                    out.append(ImportSite(str(rel), node.lineno, kind))  # type: ignore[attr-defined]
                    break
            for child in ast.iter_child_nodes(node):
                g, lz, c = guarded, lazy, cond
                if isinstance(node, ast.If) and child is not node.test:
                    c = True  # runs only when the condition holds (e.g. an availability probe)
                if isinstance(node, ast.Try) and child in node.body:
                    g = g or any(_catches_import_error(h) for h in node.handlers)
                if isinstance(node, ast.With) and child in node.body:
                    g = g or any(_suppresses_import_error(i) for i in node.items)
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                    lz = True
                visit(child, g, lz, c)

        visit(root, False, False)
    return out


# ---------------------------------------------------------------- fatbin

@dataclass
class FatbinEntry:
    offset: int  # of the entry header in the file
    header_size: int
    size: int  # payload bytes (padded)
    kind: int
    arch: int
    flags: int
    csize: int
    dsize: int

    @property
    def payload(self) -> slice:
        return slice(self.offset + self.header_size, self.offset + self.header_size + self.size)

    @property
    def stored_bytes(self) -> int:
        # compressed: the compressed length; plain: the decompressed-size field, which some
        # toolchains leave 0 (then the whole padded payload is the data)
        if self.flags & _COMPRESSED:
            return self.csize
        return self.dsize or self.size


def elf_section(data: bytes, name: str) -> tuple[int, int] | None:
    """(offset, size) of a section of a 64-bit little-endian ELF, by name."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    str_off, = struct.unpack_from("<Q", data, shoff + shstrndx * shentsize + 24)
    for i in range(shnum):
        h = shoff + i * shentsize
        name_off, = struct.unpack_from("<I", data, h)
        end = data.index(b"\0", str_off + name_off)
        if data[str_off + name_off:end].decode() == name:
            off, size = struct.unpack_from("<QQ", data, h + 24)
            return off, size
    return None


def parse_fatbin(data: bytes, start: int, size: int) -> list[list[FatbinEntry]]:
    containers, pos, end_sec = [], start, start + size
    while pos + 16 <= end_sec:
        magic, _ver, hsize, fsize = struct.unpack_from("<IHHQ", data, pos)
        if magic != FATBIN_MAGIC:
            pos += 8  # containers are 8-byte aligned; skip padding
            continue
        entries, epos, end = [], pos + hsize, pos + hsize + fsize
        while epos < end:
            kind, _, ehsize, esize = struct.unpack_from("<HHIQ", data, epos)
            csize, = struct.unpack_from("<I", data, epos + 16)
            arch, = struct.unpack_from("<I", data, epos + 28)
            flags, _, dsize = struct.unpack_from("<QQQ", data, epos + 40)
            entries.append(FatbinEntry(epos, ehsize, esize, kind, arch, flags, csize, dsize))
            epos += ehsize + esize
        if epos != end:
            raise ValueError(f"fatbin container at {pos:#x} does not parse (entries overrun)")
        containers.append(entries)
        pos = end
    return containers


def runs_on(entry: FatbinEntry, arch: int) -> bool:
    """A cubin runs on the same major architecture at an equal or lower minor."""
    return entry.kind == KIND_ELF and entry.arch // 10 == arch // 10 and entry.arch <= arch


def prune_fatbin(src: Path, dst: Path, arch: int) -> dict[str, int]:
    data = bytearray(Path(src).read_bytes())
    sec = elf_section(bytes(data), ".nv_fatbin")
    if sec is None:
        raise ValueError(f"{src}: no .nv_fatbin section")
    containers = parse_fatbin(bytes(data), *sec)
    key = lambda e: (e.kind, e.arch, e.flags & _COMPRESSED)  # noqa: E731
    donor: dict[tuple, FatbinEntry] = {}
    for e in (e for c in containers for e in c):
        if key(e) not in donor or e.stored_bytes < donor[key(e)].stored_bytes:
            donor[key(e)] = e
    donor_bytes = {k: bytes(data[d.payload]) for k, d in donor.items()}
    stats: Counter[str] = Counter()
    for entries in containers:
        has_cubin = any(runs_on(e, arch) for e in entries)
        for e in entries:
            keep = runs_on(e, arch) or (e.kind == KIND_PTX and not has_cubin and e.arch <= arch)
            d = donor[key(e)]
            if keep or d is e or d.stored_bytes > e.size:
                stats["kept_bytes"] += e.size
                continue
            data[e.payload] = donor_bytes[key(e)][:d.stored_bytes].ljust(e.size, b"\0")
            struct.pack_into("<I", data, e.offset + 16, d.csize)
            struct.pack_into("<Q", data, e.offset + 56, d.dsize)
            stats["pruned_bytes"] += e.size
            stats["pruned_entries"] += 1
    stats["containers"] = len(containers)
    Path(dst).write_bytes(bytes(data))
    os.chmod(dst, os.stat(src).st_mode)
    return dict(stats)
