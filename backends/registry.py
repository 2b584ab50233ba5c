"""Every backend by name: how to build it, its pure plan (adapter) and what it needs to run.

Every subpackage of ``backends`` is imported once (:func:`_load_plugins`, a package scan); an
engine's package registers its entries in its ``__init__`` (its capabilities declared once,
there), which imports nothing of the engine: backend modules import their framework only when a
backend starts, so ``compare plan`` and ``compare backends`` work without any framework
installed. :func:`prepare` resolves a backend's native plan once per run, and build, every repeat
and describe reuse it.

A backend name may carry a target after ``@``: ``openai@http://127.0.0.1:8000``. Where the CLI
builds a typed target instead (a :class:`BackendTarget`, e.g. backends.topology.target.Topology),
build and plan take that value as is: its ``entry`` picks the registry entry, its ``name`` is the display name.
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, replace
from typing import Any, Callable, Protocol, runtime_checkable

from adapters.spec import ServingSpec
from adapters.target import Load, Machine
from adapters.variants import Variant
from backends.base import Backend
from core.errors import UserError
from core.records import Capabilities
from core.lazy import importable


@dataclass(frozen=True)
class BackendEntry:
    name: str
    summary: str
    factory: str  # "module:Class"; called as Class(spec, name=..., target=... | native=...)
    # "module:function" -> native config dict for `compare plan`: (spec, native) for an entry with
    # ``resolve`` (and no target), else (spec [, target])
    plan: str
    requires: tuple[str, ...] = ()  # Python modules needed to run it here
    extra: str = ""  # pip extra / hint that provides them
    needs_target: bool = False  # name@TARGET required
    notes: tuple[str, ...] = ()
    check: str | None = None  # optional "module:function" -> (ok, reason) for runtime checks
    # what the backend can do: the same value its class reports (declared once, in its module)
    capabilities: Capabilities | None = None
    # "module:function" (spec, adapters.target.Target) -> the native plan, resolved once per run
    # from the probed model and machine and handed to the factory as ``native=``
    resolve: str | None = None
    # Roles the rest of the tool finds an entry by (with_role), never by its name: "reference"
    # (the float32 quality reference; its factory also takes ``device=``), "quant" (the engine
    # `compare quant run` measures every scheme on), "chat" (an endpoint that takes chat messages
    # and applies the server's own chat template).
    roles: tuple[str, ...] = ()
    # its place in `compare run`'s default --backends (1 first; 0: not among them)
    default_rank: int = 0
    # Engine-specific hooks, each a "module:attr" reference loaded only when used (hook()):
    # - heldout -> backends.heldout.HeldOut: teacher-forced held-out scoring (`compare quant quality`)
    # - tuning -> adapters.tuning.Space: the knobs `compare tune` searches and the engine's rules
    # - native_keys -> (model) -> (label, keys or None): the native keys the installed framework
    #   takes, checked before anything starts; an entry without it (a container's framework) leaves
    #   its section unchecked
    # - native_defaults -> (spec, gpu: bool) -> the engine's defaults for this machine
    # - cache_listing -> (engine-cache entry meta) -> the row `compare cache ls` shows, or None
    heldout: str | None = None
    tuning: str | None = None
    native_keys: str | None = None
    native_defaults: str | None = None
    # the ``--native SECTION.key`` section its engine options are read from, when not its own name
    # (vllm-server and vllm-container take vllm's)
    native_section: str | None = None
    cache_listing: str | None = None


@runtime_checkable
class BackendTarget(Protocol):
    """A typed backend target: the entry that builds it and the name its results are filed under
    (``str(target)`` is that name too)."""

    @property
    def entry(self) -> str: ...

    @property
    def name(self) -> str: ...


_ENTRIES: dict[str, BackendEntry] = {}


def register(entry: BackendEntry) -> None:
    """Called by a backend package's ``__init__``; one name, one entry."""
    if entry.name in _ENTRIES and _ENTRIES[entry.name] != entry:
        raise ValueError(f"backend {entry.name!r} registered twice")
    _ENTRIES[entry.name] = entry


def entries() -> list[BackendEntry]:
    """Every registered backend, sorted by name (the order of `compare backends`), whatever the
    order its package was imported in."""
    _load_plugins()
    return sorted(_ENTRIES.values(), key=lambda e: e.name)


class UnknownBackendError(UserError, ValueError):
    pass


def split_name(full: str) -> tuple[str, str | None]:
    base, _, target = full.partition("@")
    return base.strip(), (target.strip() or None)


def entry_for(full: str) -> tuple[BackendEntry, str | None]:
    _load_plugins()
    base, target = split_name(full)
    if base not in _ENTRIES:
        raise UnknownBackendError(
            f"unknown backend {base!r}; known: {', '.join(sorted(_ENTRIES))} (see `compare backends`)")
    e = _ENTRIES[base]
    if e.needs_target and not target:
        raise UnknownBackendError(f"backend {base!r} needs a target: {base}@URL")
    return e, target


def _resolve(full: str | BackendTarget) -> tuple[BackendEntry, str | BackendTarget | None, str]:
    """(entry, target handed to the backend, display name) of a name or a typed target."""
    if isinstance(full, Variant):  # a knob variant is built and planned like its base, under its own name
        e, target, _ = _resolve(full.base)
        return e, target, full.name
    if isinstance(full, str):
        e, target = entry_for(full)
        return e, target, full
    _load_plugins()
    if full.entry not in _ENTRIES:
        raise UnknownBackendError(f"unknown backend {full.entry!r}; known: {', '.join(sorted(_ENTRIES))}")
    return _ENTRIES[full.entry], full, full.name


def _load(ref: str) -> Callable[..., Any]:
    mod, _, attr = ref.partition(":")
    return getattr(importlib.import_module(mod), attr)


def load(ref: str) -> Any:
    """What a ``"module:attr"`` reference names (imports the module)."""
    return _load(ref)


def hook(entry: BackendEntry, field: str) -> Any:
    """The object an entry's hook field references, or None when the entry has none."""
    ref = getattr(entry, field)
    return _load(ref) if ref else None


def with_hook(field: str) -> list[BackendEntry]:
    """Every entry that carries ``field``, in entries() order."""
    return [e for e in entries() if getattr(e, field)]


def with_role(role: str) -> BackendEntry:
    """The one entry that plays ``role`` (see BackendEntry.roles)."""
    found = [e for e in entries() if role in e.roles]
    if len(found) != 1:
        raise LookupError(f"{len(found)} backends play the role {role!r}: {[e.name for e in found]}")
    return found[0]


@dataclass(frozen=True)
class Prepared:
    """A backend resolved against a spec: its entry and its native plan, computed once and
    reused by build (every repeat) and describe."""

    name: str  # display name (results are filed under it)
    entry: BackendEntry
    target: Any  # str after '@', a typed BackendTarget, or None
    spec: ServingSpec
    native: Any = None  # entry.resolve's result; None for targets and entries without one

    def plan(self) -> dict[str, Any]:
        fn = _load(self.entry.plan)
        if self.native is not None:
            return fn(self.spec, self.native)
        return fn(self.spec, self.target) if self.entry.needs_target or self.target else fn(self.spec)

    def build(self, **kw: Any) -> Backend:
        cls = _load(self.entry.factory)
        if self.target is not None:
            kw["target"] = self.target
        elif self.native is not None:
            kw["native"] = self.native
        return cls(self.spec, name=self.name, **kw)


def prepare(full: str | BackendTarget, spec: ServingSpec, machine: Machine | None = None,
            load: Load | None = None) -> Prepared:
    """Resolve once: probes the model (and the machine, unless given) and runs the adapter.
    ``load``: the run's offered load, for adapters whose limits follow it (TGI)."""
    e, target, name = _resolve(full)
    native = None
    if e.resolve is not None and target is None:
        from backends.models.probe import probe

        probed = probe(spec.model, machine)
        native = _load(e.resolve)(spec, replace(probed, load=load) if load is not None else probed)
    return Prepared(name, e, target, spec, native)


class Builder:
    """A backend factory ``(name, spec) -> Backend`` that resolves each backend's plan once (the
    machine probed once, each model once per spec) and builds every later backend (a repeat's
    fresh engine) from the same plan."""

    def __init__(self, load: Load | None = None, machine: Machine | None = None) -> None:
        self._prepared: dict[tuple[str, str], Prepared] = {}
        # None: this machine, probed on first use; given: the machine a plan is made for
        self._machine: Machine | None = machine
        self.load = load

    def prepare(self, full: str | BackendTarget, spec: ServingSpec) -> Prepared:
        key = (str(full) if isinstance(full, str) else repr(full), spec.model_dump_json())
        if key not in self._prepared:
            if self._machine is None:
                from backends.models.probe import probe_machine

                self._machine = probe_machine()
            self._prepared[key] = prepare(full, spec, self._machine, self.load)
        return self._prepared[key]

    def __call__(self, full: str | BackendTarget, spec: ServingSpec, **kw: Any) -> Backend:
        return self.prepare(full, spec).build(**kw)


def plan(full: str | BackendTarget, spec: ServingSpec, load: Load | None = None) -> dict[str, Any]:
    return prepare(full, spec, load=load).plan()


def build(full: str | BackendTarget, spec: ServingSpec, **kw: Any) -> Backend:
    return prepare(full, spec).build(**kw)


def availability(e: BackendEntry) -> tuple[bool, str]:
    missing = [m for m in e.requires if not importable(m)]
    if missing:
        return False, f"missing Python package(s) {', '.join(missing)}: {e.extra}"
    if e.check:
        return _load(e.check)()
    return True, "ready"


def _load_plugins() -> None:
    """Import every subpackage of ``backends`` once: a package that registers entries does so in
    its ``__init__``, which imports nothing of its engine (that waits until a backend is built or
    planned). A package that fails to import is a bug and the error propagates."""
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True  # first: a package's __init__ that asks the registry does not recurse
    import backends

    try:
        for info in sorted(pkgutil.iter_modules(backends.__path__), key=lambda m: m.name):
            if info.ispkg:
                importlib.import_module(f"backends.{info.name}")
    except BaseException:
        # not loaded: the next call imports again and raises again, never a partial registry taken as whole
        _plugins_loaded = False
        raise


_plugins_loaded = False
