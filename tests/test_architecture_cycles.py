"""Import cycles between a package's direct children: its modules and subpackages, a subpackage
counted as one node (the module-level cycle check in test_architecture.py cannot see these: no
module imports itself back)."""
from __future__ import annotations

from pathlib import Path

import tests.test_architecture as arch
from tests.test_architecture import MODULES, _imports, _package

# sibling cycles another package may keep, each with why; keep it short
SIBLING_CYCLES_ALLOWED: dict[frozenset[str], str] = {
    frozenset({"backends.http", "backends.http_backends", "backends.llamacpp"}):
        "llama.cpp's wire format lives with its backend; the HTTP protocol table names it lazily",
}


def _sibling_cycles(modules: dict[str, Path]) -> list[list[str]]:
    """Cycles among the direct children (modules and subpackages) of each package, a subpackage
    counted as one node: ``cli/request.py`` importing ``cli/commands/common.py`` while
    ``cli/commands/run.py`` imports ``cli/request.py`` is a cycle, though no module imports itself back."""
    packages = {_package(m) for m in modules} | {m for m, p in modules.items() if p.name == "__init__.py"}
    found = []
    for pkg in sorted(packages):
        def child(m: str) -> str | None:
            return pkg + "." + m[len(pkg) + 1:].split(".")[0] if m.startswith(pkg + ".") else None
        out: dict[str, set[str]] = {}
        for m, path in modules.items():
            a = child(m)
            if a is None:
                continue
            for d in _imports(m, path):
                b = child(d)
                if b is not None and b != a:
                    out.setdefault(a, set()).add(b)

        def reach(a: str) -> set[str]:
            seen, todo = set(), [a]
            while todo:
                for y in out.get(todo.pop(), ()):
                    if y not in seen:
                        seen.add(y)
                        todo.append(y)
            return seen
        r = {n: reach(n) for n in out}
        comps = {frozenset({n} | {x for x in r[n] if n in r.get(x, ())}) for n in out}
        found += [sorted(c) for c in comps if len(c) > 1 and c not in SIBLING_CYCLES_ALLOWED]
    return sorted(found)


def test_no_cycles_between_sibling_modules_and_packages():
    assert _sibling_cycles(MODULES) == [], f"import cycles between a package's modules and subpackages: " \
                                           f"{_sibling_cycles(MODULES)}"


def test_the_guard_sees_a_sibling_cycle(tmp_path):
    # compare/cli/request.py -> cli/commands/common.py while cli/commands/run.py -> cli/request.py
    files = {"compare/cli/__init__.py": "", "compare/cli/request.py": "from compare.cli.commands import common\n",
             "compare/cli/commands/__init__.py": "", "compare/cli/commands/common.py": "",
             "compare/cli/commands/run.py": "from compare.cli import request\n"}
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    mods = {"compare.cli": tmp_path / "compare/cli/__init__.py", "compare.cli.request": tmp_path / "compare/cli/request.py",
            "compare.cli.commands": tmp_path / "compare/cli/commands/__init__.py",
            "compare.cli.commands.common": tmp_path / "compare/cli/commands/common.py",
            "compare.cli.commands.run": tmp_path / "compare/cli/commands/run.py"}
    saved = dict(arch.MODULES)
    arch.MODULES.clear()
    arch.MODULES.update(mods)
    try:
        assert _sibling_cycles(mods) == [["compare.cli.commands", "compare.cli.request"]]
    finally:
        arch.MODULES.clear()
        arch.MODULES.update(saved)
