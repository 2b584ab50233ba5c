"""The package structure, guarded: imports run one way between layers, no circles, small modules.

Layers, lowest first (a module may import its own layer and those below it):
core (errors, records, results, file and hardware helpers) < adapters (pure spec translation) <
containers < backends (I/O with engines) < compare, whose subpackages are ordered the same way:
workload < analysis < quality < running < tuning < bundling < report < cli.
Every import counts, also those inside functions (a lazy import is still a dependency).
A module's underscore names are its own: another package reaches it through public names only.
"""
from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

PACKAGES = ("core", "adapters", "containers", "backends", "compare")
COMPARE_LAYERS = ("workload", "analysis", "quality", "running", "tuning", "bundling", "report", "cli")
MAX_LINES = 400
# a pure layer does no I/O: these modules never appear in it
IMPURE = {"os", "shutil", "subprocess", "socket", "pathlib", "glob", "tempfile", "urllib", "httpx",
          "docker", "psutil", "io"}


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for p in sorted((ROOT / pkg).rglob("*.py")):
            rel = p.relative_to(ROOT).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts.pop()
            if any("-" in x for x in parts):  # container build contexts, not importable
                continue
            out[".".join(parts)] = p
    return out


MODULES = _modules()


def _from_module(name: str, is_pkg: bool, node: ast.ImportFrom) -> str:
    """The absolute module of a ``from ... import`` in module ``name`` (relative ones resolved)."""
    if not node.level:
        return node.module or ""
    base = name.split(".") if is_pkg else name.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(name: str, path: Path) -> set[str]:
    """Every project module (or package) ``name`` imports, anywhere in the file."""
    deps = set()
    is_pkg = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            mod = _from_module(name, is_pkg, node)
            targets = [mod] + [f"{mod}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            continue
        for t in targets:
            if t.split(".")[0] in PACKAGES and t in MODULES and t != name:
                deps.add(t)
    return deps


def _package(module: str) -> str:
    """The package a module belongs to (a package's ``__init__`` belongs to that package)."""
    return module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]


def _private_uses(name: str, path: Path) -> set[str]:
    """``module._name`` for every underscore name ``name`` takes from another project module:
    ``from m import _x`` and ``m._x`` on a module bound by an import (dunders are not private)."""
    out, bound = set(), {}
    is_pkg = path.name == "__init__.py"
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            mod = _from_module(name, is_pkg, node)
            for a in node.names:
                if f"{mod}.{a.name}" in MODULES:  # a submodule: later attribute uses count
                    bound[a.asname or a.name] = f"{mod}.{a.name}"
                elif mod in MODULES and a.name.startswith("_") and not a.name.startswith("__"):
                    out.add(f"{mod}.{a.name}")
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.asname and a.name in MODULES:
                    bound[a.asname] = a.name
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound
                and node.attr.startswith("_") and not node.attr.startswith("__")):
            out.add(f"{bound[node.value.id]}.{node.attr}")
    return {u for u in out if u.rpartition(".")[0] != name}


# private names another package may take, each with why it cannot be public; keep it short
PRIVATE_ALLOWED: dict[str, str] = {}


def _stdlib_imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.add(node.module.split(".")[0])
    return out


GRAPH = {m: _imports(m, p) for m, p in MODULES.items()}


def layer(module: str) -> tuple[int, int]:
    parts = module.split(".")
    top = PACKAGES.index(parts[0])
    if parts[0] == "compare" and len(parts) > 1 and parts[1] in COMPARE_LAYERS:
        return top, COMPARE_LAYERS.index(parts[1]) + 1
    return top, 0


def test_every_compare_subpackage_has_a_layer():
    subs = {p.name for p in (ROOT / "compare").iterdir() if (p / "__init__.py").exists()}
    assert subs == set(COMPARE_LAYERS), "a new compare/ subpackage needs its place in COMPARE_LAYERS"


def test_imports_run_downward_only():
    back = sorted(f"{m} -> {d}" for m, deps in GRAPH.items() for d in deps
                  if layer(d) > layer(m) and not m.startswith(d + "."))
    assert back == [], "imports from a lower layer into a higher one:\n" + "\n".join(back)


def test_no_import_cycles():
    # Tarjan's strongly connected components over the module graph; a package importing its own
    # submodules (re-exports in __init__) is not a cycle by itself
    def edges(m):
        return [d for d in GRAPH[m] if not d.startswith(m + ".")]
    index, low, stack, on, sccs, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(sorted(comp))
    for m in sorted(GRAPH):
        if m not in index:
            visit(m)
    assert sccs == [], f"import cycles: {sccs}"


def test_modules_stay_small():
    big = sorted(f"{p.relative_to(ROOT)} ({n} lines)" for p in MODULES.values()
                 if (n := len(p.read_text().splitlines())) > MAX_LINES)
    assert big == [], f"modules over {MAX_LINES} lines (split by responsibility):\n" + "\n".join(big)


def test_no_private_names_across_packages():
    bad = sorted(f"{m} uses {u}" for m, p in MODULES.items() for u in _private_uses(m, p)
                 if _package(u.rpartition(".")[0]) != _package(m) and u not in PRIVATE_ALLOWED)
    assert bad == [], ("a private name used from another package (make it public in its module, or allow it in "
                       "PRIVATE_ALLOWED with the reason):\n" + "\n".join(bad))


def test_adapters_do_no_io():
    bad = sorted(f"{m}: {sorted(_stdlib_imports(p) & IMPURE)}" for m, p in MODULES.items()
                 if m.startswith("adapters") and _stdlib_imports(p) & IMPURE)
    assert bad == [], "adapters/ is pure (translation only); I/O belongs to backends/:\n" + "\n".join(bad)


def test_the_guard_sees_a_back_import(tmp_path):
    # the checker itself: a core module importing compare must be reported
    p = tmp_path / "x.py"
    p.write_text("def f():\n    from compare.cli import main\n")
    assert "compare.cli" in _imports("core.x", p)
    assert layer("compare.cli") > layer("core.x")


def test_the_guard_sees_a_private_name_taken(tmp_path):
    p = tmp_path / "x.py"
    p.write_text("from compare.running import executor as ex\nfrom core.hardware import _x\n"
                 "def f():\n    from compare.analysis.metrics import __all__, dist\n    return ex._y\n")
    assert _private_uses("backends.x", p) == {"core.hardware._x", "compare.running.executor._y"}
    assert _package("core.hardware") == "core" and _package("compare.running") == "compare.running"


# ---------------------------------------------------------------- engines stay in their packages
# compare/ reaches an engine only through the registry: its entry's fields and hooks (roles,
# heldout, tuning, native_keys, cache_listing, ...), never by importing the engine's package or
# by writing the backend's name. The only literals allowed are these, each with its reason.
NAME_ALLOWED = {
    ("compare/bundling/profiles.py", "vllm"): "a Python distribution's name (the bundled wheel set), not a backend",
    ("compare/cli/commands/bundle.py", "vllm"): "a Python distribution's name (the bundled wheel set), not a backend",
}


def _entries() -> list:
    from backends import registry

    return registry.entries()


def _engine_packages() -> set[str]:
    """Subpackages of backends whose entries declare capabilities: the engines (topologies wrap an
    engine and declare none; the shared plumbing registers nothing)."""
    return {e.factory.split(":")[0].split(".")[1] for e in _entries()
            if e.capabilities is not None and e.factory.count(".") >= 2}


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _protocol_values(tree: ast.AST) -> set[int]:
    """``protocol="openai"``: a wire protocol's name (backends/http/protocols.py), not a backend."""
    return {id(k.value) for node in ast.walk(tree) if isinstance(node, ast.Call)
            for k in node.keywords if k.arg == "protocol" and isinstance(k.value, ast.Constant)}


def _names_written(path: Path, names: set[str]) -> set[str]:
    """The backend names ``path`` writes as string literals (``"vllm"``, ``"vllm@..."``), docstrings
    and protocol names aside."""
    tree = ast.parse(path.read_text())
    skip = _docstrings(tree) | _protocol_values(tree)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            base = node.value.partition("@")[0]
            if base in names and (node.value == base or "@" in node.value):
                found.add(base)
    return found


def test_compare_imports_no_engine_module():
    engines = _engine_packages()
    assert {"vllm", "hf", "openvino", "tgi", "trtllm", "llamacpp"} <= engines
    bad = sorted(f"{m} imports {d}" for m in MODULES if m.startswith("compare") for d in GRAPH[m]
                 if d.split(".")[:1] == ["backends"] and len(d.split(".")) > 1 and d.split(".")[1] in engines)
    assert bad == [], ("compare/ imports an engine's module; give the engine's entry a hook "
                       "(backends/registry.py BackendEntry) and reach it through the registry:\n" + "\n".join(bad))


def test_compare_names_no_backend():
    names = {e.name for e in _entries()}
    bad = sorted(f"{p.relative_to(ROOT)}: {n!r}" for m, p in MODULES.items() if m.startswith("compare")
                 for n in _names_written(p, names) if (str(p.relative_to(ROOT)), n) not in NAME_ALLOWED)
    assert bad == [], ("compare/ names a backend; find it through the registry (a role or a hook on its "
                       "entry) instead:\n" + "\n".join(bad))


def _engine_words() -> set[str]:
    """What only an engine knows, as strings compare/ could test a backend against: backend and
    engine package names, wire protocol names, each backend class's ``framework`` and the TGI
    client names (``--native tgi.client=...``)."""
    import importlib

    from backends.http.protocols import protocols
    from backends.http.tgi_client import TGI_CLIENTS

    words = {e.name for e in _entries()} | _engine_packages() | set(protocols()) | set(TGI_CLIENTS)
    for e in _entries():
        module = importlib.import_module(e.factory.partition(":")[0])
        words |= {c.framework for c in vars(module).values()
                  if isinstance(c, type) and isinstance(getattr(c, "framework", None), str)}
    return words


def _engine_tests(path: Path, words: set[str]) -> set[str]:
    """The engine words ``path`` tests a value against: ``x == "tgi"``, ``x in ("vllm", ...)``,
    ``x != "text-generation"``, ``x.startswith("tgi@")``, ``case "vllm":``."""
    found = set()

    def strings(node: ast.AST) -> list[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return [s for x in node.elts for s in strings(x)]
        return []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Compare):
            tested = [s for x in (node.left, *node.comparators) for s in strings(x)]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("startswith", "endswith")):
            tested = [s for a in node.args for s in strings(a)]
        elif isinstance(node, ast.MatchValue):
            tested = strings(node.value)
        else:
            continue
        found |= {s if s in words else s.partition("@")[0] for s in tested
                  if s in words or s.partition("@")[0] in words}
    return found


def test_compare_tests_no_value_against_an_engine_word():
    words = _engine_words()
    assert {"tgi", "openai-chat", "trtllm-openai", "text-generation", "text-generation-inference"} <= words
    bad = sorted(f"{p.relative_to(ROOT)}: {w!r}" for m, p in MODULES.items() if m.startswith("compare")
                 for w in _engine_tests(p, words) if (str(p.relative_to(ROOT)), w) not in NAME_ALLOWED)
    assert bad == [], ("compare/ tests a value against what only an engine knows (a backend, protocol, "
                       "framework or client name); declare it on the backend (an attribute or capability) or "
                       "its registry entry and read that instead:\n" + "\n".join(bad))


def test_the_guard_sees_an_engine_word_tested(tmp_path):
    p = tmp_path / "x.py"
    p.write_text('def f(b, n):\n    if getattr(b, "client", None) == "text-generation":\n        return 1\n'
                 '    match n:\n        case "hf-cb":\n            return 2\n'
                 '    return n in ("vllm", "x") or n.startswith("tgi@") or n == "openai-compatible" or n == "fine"\n')
    words = {"text-generation", "hf-cb", "vllm", "tgi", "openai-compatible"}
    assert _engine_tests(p, words) == words


def test_the_guard_sees_an_engine_named_or_imported(tmp_path):
    p = tmp_path / "x.py"
    p.write_text('"""About vllm."""\ndef f(b):\n    """vllm"""\n    from backends.vllm.inproc import VllmBackend\n'
                 '    c = Client(protocol="openai")\n    return b == "vllm" or b.startswith("tgi@")\n')
    assert _names_written(p, {"vllm", "tgi", "openai"}) == {"vllm", "tgi"}
    assert "backends.vllm.inproc" in _imports("compare.x", p)
