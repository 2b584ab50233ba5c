"""Backends are found by a scan of the ``backends`` packages: a package registers its entries in its
``__init__``, which imports nothing of its engine."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from backends import registry

ROOT = Path(__file__).resolve().parents[2]
FRAMEWORKS = ("vllm", "torch", "transformers", "openvino", "openvino_genai", "tensorrt_llm", "docker", "yaml")


def test_registration_imports_only_the_package_inits():
    # a fresh interpreter: this one may already hold engine modules another test imported
    code = ("import json, sys\n"
            "from backends import registry\n"
            "names = [e.name for e in registry.entries()]\n"
            "print(json.dumps({'names': names, 'modules': sorted(sys.modules)}))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120,
                       check=True)
    out = json.loads(p.stdout)
    packages = {e.factory.split(":")[0].split(".")[1] for e in registry.entries()} - {"http_backends"}
    engine_modules = [m for m in out["modules"] if m.count(".") >= 2 and m.split(".")[1] in packages]
    assert engine_modules == [], "a package __init__ imported its engine modules at registration"
    assert [m for m in FRAMEWORKS if m in out["modules"]] == []
    # every package that registers was found, in the documented order (by name)
    assert out["names"] == sorted(out["names"])
    assert {"vllm", "vllm-server", "vllm-container", "hf", "hf-cb", "openvino", "tgi", "trtllm", "trtllm-inproc",
            "llamacpp", "fake", "openai", "openai-chat", "tp", "replicas"} <= set(out["names"])


def test_every_reference_of_every_entry_satisfies_its_contract():
    """Every reference of every entry (factory, plan, resolve, check, each hook, the client classes
    of the factory's module) imports and is what backends/contracts.py says it must be."""
    assert registry.validate_all() == []
    # the hooks were looked at too, through their typed accessors
    assert registry.tuning_of(registry.entry_for("vllm")[0]).backend == "vllm"
    assert registry.heldout_of(registry.with_role("reference")) is not None
    assert registry.native_keys_of(registry.entry_for("openai@http://127.0.0.1:1")[0]) is None


def _entry(**kw):
    base = dict(name="x", summary="", factory="backends.fake.engine:FakeBackend", plan="backends.fake.engine:plan")
    return registry.BackendEntry(**(base | kw))


def test_validation_reports_each_kind_of_wrong_reference():
    assert registry.validate(_entry()) == []
    problems = registry.validate(_entry(
        plan="backends.hf.native:checked_keys",  # (model, options), not (spec, native, target)
        check="backends.fake.nowhere:check",  # a module that does not exist
        tuning="backends.vllm.heldout:HELDOUT",  # a HeldOut where a Space belongs
        native_defaults="backends.vllm.native:native_defaults",  # right
        resolve="backends.fake.engine:plan",  # takes (spec, target) fine, but the factory takes no native=
    ))
    text = "\n".join(problems)
    assert "plan='backends.hf.native:checked_keys' does not take" in text
    assert "check='backends.fake.nowhere:check' does not load: ModuleNotFoundError" in text
    assert "tuning='backends.vllm.heldout:HELDOUT' is a HeldOut, not a Space" in text
    assert "factory='backends.fake.engine:FakeBackend' does not take (positional, name, native)" in text
    assert "native_defaults" not in text and len(problems) == 4


def test_validation_reports_a_backend_class_outside_the_base_and_a_broken_client_class(tmp_path, monkeypatch):
    """Of the backend classes of the factory's module: one outside BackendBase, a stream without the
    request context, a client class that does not load."""
    (tmp_path / "zz_backend_module.py").write_text(
        "from backends.base import BackendBase\n"
        "class Loose:\n    def __init__(self, spec, name='x', target=None): pass\n"
        "    def stream(self, req, ctx=None): pass\n    def describe(self): pass\n"
        "class Sharded(BackendBase):\n    client_class = 'zz_backend_module:Gone'\n"
        "    def __init__(self, spec, name='x', target=None): pass\n"
        "    def stream(self, req): pass\n    def describe(self): pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    problems = registry.validate(_entry(factory="zz_backend_module:Sharded"))
    assert problems == ["x: zz_backend_module.Loose does not derive from backends.base.BackendBase",
                        "x: zz_backend_module.Sharded.stream does not take (positional, positional, positional) "
                        "as Stream requires: too many positional arguments",
                        "x: Sharded.client_class does not load: AttributeError: module 'zz_backend_module' "
                        "has no attribute 'Gone'"]


def test_a_hook_of_the_wrong_kind_fails_when_used():
    with pytest.raises(TypeError, match="tuning='backends.vllm.heldout:HELDOUT' is a HeldOut, not a Space"):
        registry.tuning_of(_entry(tuning="backends.vllm.heldout:HELDOUT"))
    with pytest.raises(ValueError, match="not a registry hook"):
        registry.with_hook("plan")


def test_a_name_registered_twice_is_refused():
    e = registry.entries()[0]
    registry.register(e)  # the same entry again (a package imported twice) is harmless
    try:
        registry.register(registry.BackendEntry(name=e.name, summary="another", factory="x:y", plan="x:y"))
    except ValueError as err:
        assert e.name in str(err)
    else:
        raise AssertionError("a second entry under one name was accepted")
    assert registry.entry_for(e.name)[0] is e


def test_a_package_that_fails_to_import_leaves_no_registry_taken_as_whole(monkeypatch, tmp_path):
    """A backend package whose __init__ raises: every call raises again (the registry is not marked
    loaded with the entries registered before it)."""
    import importlib
    import sys

    from backends import registry

    bad = tmp_path / "zz_broken_engine"
    bad.mkdir()
    (bad / "__init__.py").write_text("raise RuntimeError('broken engine package')\n")
    import backends

    monkeypatch.setattr(backends, "__path__", [*backends.__path__, str(tmp_path)])
    monkeypatch.setattr(registry, "_plugins_loaded", False)
    for _ in range(2):
        with pytest.raises(RuntimeError, match="broken engine package"):
            registry.entries()
        sys.modules.pop("backends.zz_broken_engine", None)
    assert registry._plugins_loaded is False
    monkeypatch.setattr(backends, "__path__", [p for p in backends.__path__ if p != str(tmp_path)])
    assert any(e.name == "vllm" for e in registry.entries())  # the real packages load once it is gone
    importlib.invalidate_caches()
