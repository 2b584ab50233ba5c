"""What each ``"module:attr"`` reference of a registry entry (backends/registry.py BackendEntry) must be.

A callable reference has a Protocol here, whose ``__call__`` is the signature the registry calls it
with; an object reference (``heldout``, ``tuning``) is an instance of its record class. The
registry's typed accessors return these types, and :func:`conforms` checks a loaded reference
against its contract without calling it (the signature must bind the arguments the registry
passes), so a wrong reference fails when the registry is validated, not when a command first uses it.
"""
from __future__ import annotations

import inspect
from typing import Any, Protocol

from adapters.spec import ServingSpec
from adapters.target import Target
from backends.base import Backend
from core.records import GenerationRequest, RequestContext


class Factory(Protocol):
    """``factory``: builds the backend; also given ``target=`` (name@TARGET), ``native=`` (the
    entry's resolved plan) and, for the "reference" role, ``device=``."""

    def __call__(self, spec: ServingSpec, /, *, name: str, **kw: Any) -> Backend: ...


class Stream(Protocol):
    """A backend class's ``stream``, unbound: (self, request, ctx) (backends/base.py Backend)."""

    def __call__(self, backend: Any, request: GenerationRequest, ctx: RequestContext | None, /) -> Any: ...


class Plan(Protocol):
    """``plan``: what `compare plan` shows: from the resolved native plan (None for an entry without
    ``resolve`` or for a target) and the target (None without one)."""

    def __call__(self, spec: ServingSpec, native: Any, target: Any, /) -> dict[str, Any]: ...


class Resolve(Protocol):
    """``resolve``: the native plan for the probed model and machine, computed once per run."""

    def __call__(self, spec: ServingSpec, target: Target, /) -> Any: ...


class Check(Protocol):
    """``check``: can this backend run here: (ok, the reason shown by `compare backends`)."""

    def __call__(self) -> tuple[bool, str]: ...


class NativeKeys(Protocol):
    """``native_keys``: (what a key of the section is, the keys the installed framework takes, or
    None where they cannot be known), given the model and the section's options (an engine binary
    named there is the one whose keys count)."""

    def __call__(self, model: str, options: dict[str, Any], /) -> tuple[str, set[str] | None]: ...


class NativeDefaults(Protocol):
    """``native_defaults``: the engine's native defaults for this spec on this machine."""

    def __call__(self, spec: ServingSpec, gpu: bool, /) -> dict[str, Any]: ...


class CacheListing(Protocol):
    """``cache_listing``: the `compare cache ls` row of an engine-cache entry's metadata, or None
    for another engine's entry."""

    def __call__(self, meta: dict[str, Any], /) -> dict[str, Any] | None: ...


_PLACEHOLDER = object()


def conforms(obj: Any, contract: type, **keywords: Any) -> str | None:
    """None when ``obj`` satisfies ``contract``, else what is wrong (one line). A record class is an
    isinstance check; a callable Protocol is a check that ``obj``'s signature binds the Protocol's
    positional parameters and its required keywords (plus ``keywords``, names the caller also passes)."""
    if not _is_protocol(contract):
        return None if isinstance(obj, contract) else f"is a {type(obj).__name__}, not a {contract.__name__}"
    if not callable(obj):
        return f"is a {type(obj).__name__}, not callable"
    want = list(inspect.signature(contract.__call__).parameters.values())[1:]  # without self
    args = [_PLACEHOLDER for p in want if p.kind is p.POSITIONAL_ONLY]
    kw = {p.name: _PLACEHOLDER for p in want if p.kind is p.KEYWORD_ONLY} | dict.fromkeys(keywords, _PLACEHOLDER)
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None  # a builtin without a signature: nothing to check
    try:
        sig.bind(*args, **kw)
    except TypeError as e:
        shown = ", ".join(["positional"] * len(args) + sorted(kw))
        return f"does not take ({shown}) as {contract.__name__} requires: {e}"
    return None


def _is_protocol(cls: type) -> bool:
    return bool(getattr(cls, "_is_protocol", False))
