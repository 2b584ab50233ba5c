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
from typing import Any, Protocol, cast, runtime_checkable

from adapters.spec import ServingSpec
from adapters.target import Load, Machine
from adapters.tuning import Space
from adapters.variants import Variant
from backends import contracts
from backends.base import Backend, BackendBase
from backends.heldout import HeldOut
from core.errors import UserError
from core.records import Capabilities
from core.lazy import importable


@dataclass(frozen=True)
class BackendEntry:
    name: str
    summary: str
    # Every "module:attr" reference below must be what backends/contracts.py declares for its
    # field (validate() checks them all without running anything).
    factory: str  # "module:Class"; called as Class(spec, name=..., target=... | native=...)
    plan: str  # "module:function" (spec, native, target) -> the config `compare plan` shows
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
    # Engine-specific hooks, each a "module:attr" reference loaded only when used, through its
    # typed accessor (heldout_of, tuning_of, ...):
    # - heldout -> backends.heldout.HeldOut: teacher-forced held-out scoring (`compare quant quality`)
    # - tuning -> adapters.tuning.Space: the knobs `compare tune` searches and the engine's rules
    # - native_keys -> contracts.NativeKeys: the native keys the installed framework takes, checked
    #   before anything starts; an entry without it (a container's framework) leaves its section unchecked
    # - native_defaults -> contracts.NativeDefaults: the engine's defaults for this machine
    # - cache_listing -> contracts.CacheListing: the row `compare cache ls` shows, or None
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


def _load(ref: str) -> Any:
    mod, _, attr = ref.partition(":")
    return getattr(importlib.import_module(mod), attr)


# every reference field of an entry and its contract (backends/contracts.py)
CONTRACTS: dict[str, type] = {
    "factory": contracts.Factory, "plan": contracts.Plan, "resolve": contracts.Resolve, "check": contracts.Check,
    "heldout": HeldOut, "tuning": Space, "native_keys": contracts.NativeKeys,
    "native_defaults": contracts.NativeDefaults, "cache_listing": contracts.CacheListing,
}
HOOKS = ("heldout", "tuning", "native_keys", "native_defaults", "cache_listing")


def _ref(entry: BackendEntry, field: str) -> Any:
    """The loaded reference of ``field``, None where the entry has none; a reference that is not of
    its field's kind (a record class: checked here, cheaply) raises TypeError naming it."""
    ref = getattr(entry, field)
    if not ref:
        return None
    obj = _load(ref)
    kind = CONTRACTS[field]
    if not getattr(kind, "_is_protocol", False) and not isinstance(obj, kind):
        raise TypeError(f"backend {entry.name!r}: {field}={ref!r} is a {type(obj).__name__}, not a {kind.__name__}")
    return obj


def factory_of(entry: BackendEntry) -> contracts.Factory:
    return cast(contracts.Factory, _ref(entry, "factory"))


def heldout_of(entry: BackendEntry) -> HeldOut | None:
    return cast("HeldOut | None", _ref(entry, "heldout"))


def tuning_of(entry: BackendEntry) -> Space | None:
    return cast("Space | None", _ref(entry, "tuning"))


def native_keys_of(entry: BackendEntry) -> contracts.NativeKeys | None:
    return cast("contracts.NativeKeys | None", _ref(entry, "native_keys"))


def native_defaults_of(entry: BackendEntry) -> contracts.NativeDefaults | None:
    return cast("contracts.NativeDefaults | None", _ref(entry, "native_defaults"))


def cache_listing_of(entry: BackendEntry) -> contracts.CacheListing | None:
    return cast("contracts.CacheListing | None", _ref(entry, "cache_listing"))


def with_hook(field: str) -> list[BackendEntry]:
    """Every entry that carries the hook ``field`` (one of HOOKS), in entries() order."""
    if field not in HOOKS:
        raise ValueError(f"{field!r} is not a registry hook; hooks: {', '.join(HOOKS)}")
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
        fn: contracts.Plan = _ref(self.entry, "plan")
        return fn(self.spec, self.native, self.target)

    def build(self, **kw: Any) -> Backend:
        if self.target is not None:
            kw["target"] = self.target
        elif self.native is not None:
            kw["native"] = self.native
        return factory_of(self.entry)(self.spec, name=self.name, **kw)


def prepare(full: str | BackendTarget, spec: ServingSpec, machine: Machine | None = None,
            load: Load | None = None) -> Prepared:
    """Resolve once: probes the model (and the machine, unless given) and runs the adapter.
    ``load``: the run's offered load, for adapters whose limits follow it (TGI)."""
    e, target, name = _resolve(full)
    native = None
    if e.resolve is not None and target is None:
        from backends.models.probe import probe

        probed = probe(spec.model, machine)
        resolve: contracts.Resolve = _ref(e, "resolve")
        native = resolve(spec, replace(probed, load=load) if load is not None else probed)
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
    check: contracts.Check | None = _ref(e, "check")
    return check() if check is not None else (True, "ready")


def validate(e: BackendEntry) -> list[str]:
    """What is wrong with ``e``'s references, one line each (none: every one imports and satisfies
    its contract): each field's reference, the keywords the registry builds it with, and of every
    backend class its factory's module holds: that it derives from BackendBase, that its stream
    takes (request, ctx), and its client class (``client_class``)."""
    problems = []
    for field, kind in CONTRACTS.items():
        ref = getattr(e, field)
        if not ref:
            continue
        try:
            obj = _load(ref)
        except Exception as err:  # reported, whatever the import raised
            problems.append(f"{e.name}: {field}={ref!r} does not load: {type(err).__name__}: {err}")
            continue
        keywords = _factory_keywords(e) if field == "factory" else ()
        for kw in keywords or [()]:
            why = contracts.conforms(obj, kind, **dict.fromkeys(kw))
            if why:
                problems.append(f"{e.name}: {field}={ref!r} {why}")
    if not problems:
        module = importlib.import_module(e.factory.partition(":")[0])
        classes = [c for c in vars(module).values() if isinstance(c, type) and not getattr(c, "_is_protocol", False)
                   and callable(getattr(c, "stream", None)) and callable(getattr(c, "describe", None))]
        problems += [f"{e.name}: {c.__module__}.{c.__name__} does not derive from backends.base.BackendBase"
                     for c in classes if not issubclass(c, BackendBase)]
        problems += [f"{e.name}: {c.__module__}.{c.__name__}.stream {why}" for c in classes
                     if (why := contracts.conforms(c.stream, contracts.Stream))]
        refs = {c.__name__: getattr(c, "client_class", None) for c in classes}
        for cls, ref in sorted((c, r) for c, r in refs.items() if isinstance(r, str)):
            try:
                client = _load(ref)
            except Exception as err:  # reported likewise
                problems.append(f"{e.name}: {cls}.client_class does not load: {type(err).__name__}: {err}")
                continue
            why = contracts.conforms(client, contracts.Factory) if isinstance(client, type) else "is not a class"
            if why:
                problems.append(f"{e.name}: {cls}.client_class={ref!r} {why}")
    return problems


def _factory_keywords(e: BackendEntry) -> list[tuple[str, ...]]:
    """The keyword sets the registry and its callers build ``e`` with (besides ``name``)."""
    out: list[tuple[str, ...]] = []
    if e.resolve:
        out.append(("native",))
    if e.needs_target or not e.resolve:
        out.append(("target",))
    if "reference" in e.roles:
        out.append(("device",) + (("native",) if e.resolve else ()))
    return out


def validate_all() -> list[str]:
    """:func:`validate` over every entry."""
    return [p for e in entries() for p in validate(e)]


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
