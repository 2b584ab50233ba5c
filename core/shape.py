"""Files of the right syntax but the wrong shape, said in one line.

Every file the tool reads is checked against the typed model it becomes (a pydantic model or a
frozen dataclass), never against a second list of fields: this module turns the first thing the
model refuses into ``FIELD VALUE: what is allowed``, and finds the line of a YAML key so the
message can name it.
"""
from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import math
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["ShapeError", "dataclass_from", "first_problem", "show_value", "yaml_key_lines"]


class ShapeError(ValueError):
    """A value of the wrong type or range; the message is ``FIELD VALUE: what is allowed``."""

    def __init__(self, message: str, loc: tuple[str | int, ...] = ()) -> None:
        super().__init__(message)
        self.loc = loc


def show_value(value: Any, limit: int = 40) -> str:
    """A value as the user wrote it in JSON/YAML terms, cut to ``limit`` characters."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (int, float)):
        return "a number"
    return "null" if value is None else type(value).__name__


def _fields_at(model: Any, loc: Sequence[str | int]) -> list[str]:
    """The field names of the (sub)model that holds ``loc``'s last key; [] when not a model."""
    for key in loc[:-1]:
        fields = getattr(model, "model_fields", None)
        if fields is None or not isinstance(key, str) or key not in fields:
            return []
        ann = fields[key].annotation
        model = next((a for a in (typing.get_args(ann) or (ann,)) if hasattr(a, "model_fields")), None)
    return list(getattr(model, "model_fields", {}) or [])


def first_problem(e: Any, model: Any = None) -> str:
    """The first error of a pydantic ``ValidationError`` as ``field value: what is allowed``;
    an unknown field names the fields ``model`` allows there (and the nearest one)."""
    err = e.errors()[0]
    loc = tuple(err.get("loc") or ())
    where = ".".join(str(p) for p in loc) or "(top level)"
    if err.get("type") == "extra_forbidden":
        allowed = _fields_at(model, loc) if model is not None else []
        near = difflib.get_close_matches(str(loc[-1]), allowed, n=1) if loc and allowed else []
        hint = (f" (allowed: {', '.join(allowed)}" + (f"; did you mean {near[0]}?" if near else "") + ")"
                if allowed else "")
        return f"{where}: not a known field{hint}"
    if err.get("type") == "missing":
        return f"{where}: missing (it is required)"
    value = err.get("input")
    msg = str(err.get("msg", "invalid")).replace("Input should be", "should be").replace("Value error, ", "")
    msg = re.sub(r"a valid dictionary or instance of (\w+)", r"a mapping of \1 fields", msg)
    if not loc:  # (a check of the whole model: its message says what is wrong)
        return msg
    return f"{where} {show_value(value)} ({_kind(value)}): {msg}"


def yaml_key_lines(text: str) -> dict[tuple[str | int, ...], int]:
    """Line (1-based) of every key and list item of a YAML document, by its path: ``{("input",
    "value"): 3}``. Empty when the text is not YAML (its reader has refused it already)."""
    import yaml

    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return {}
    out: dict[tuple[str | int, ...], int] = {}

    def walk(node: Any, path: tuple[str | int, ...]) -> None:
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                key = (path + (str(k.value),)) if isinstance(k, yaml.ScalarNode) else path
                out.setdefault(key, k.start_mark.line + 1)
                walk(v, key)
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                out.setdefault(path + (i,), v.start_mark.line + 1)
                walk(v, path + (i,))

    if root is not None:
        walk(root, ())
    return out


def line_of(lines: Mapping[tuple[str | int, ...], int], loc: Sequence[str | int]) -> int | None:
    """The line of the deepest part of ``loc`` that the file has (pydantic adds union tags)."""
    loc = tuple(loc)
    while loc:
        if loc in lines:
            return lines[loc]
        loc = loc[:-1]
    return None


# ---------------------------------------------------------------- frozen dataclasses from JSON


_SCALARS: dict[Any, frozenset[type]] = {int: frozenset({int}), float: frozenset({int, float}),
                                        str: frozenset({str}), bool: frozenset({bool})}


@functools.lru_cache(maxsize=None)
def _checker(ann: Any, finite: bool) -> Callable[[Any], bool]:
    """Whether a JSON value fits a dataclass field's annotation (int, float, str, bool, None,
    ``X | None``, ``tuple[T, ...]``, ``tuple[A, B]``, a mapping; lists stand in for tuples), as a
    check built once per annotation (records are read by the million). ``finite``: a float must be
    finite (not for measured values such as a logprob of -inf)."""
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if ann is Any:
        return lambda v: True
    if ann is type(None) or ann is None:
        return lambda v: v is None
    if origin in (typing.Union, types.UnionType):
        checks = [_checker(a, finite) for a in args]
        return lambda v: any(c(v) for c in checks)
    if ann in _SCALARS:
        kinds = _SCALARS[ann]
        if ann is float and finite:
            return lambda v: type(v) in kinds and math.isfinite(v)
        return lambda v: type(v) in kinds
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        if args[0] in _SCALARS and not (args[0] is float and finite):
            kinds = _SCALARS[args[0]]  # (the long stamp and token lists: checked at C speed)
            return lambda v: isinstance(v, (list, tuple)) and set(map(type, v)) <= kinds
        item = _checker(args[0], finite)
        return lambda v: isinstance(v, (list, tuple)) and all(item(x) for x in v)
    if origin is tuple:
        items = [_checker(a, finite) for a in args]
        return lambda v: (isinstance(v, (list, tuple)) and len(v) == len(items)
                          and all(c(x) for c, x in zip(items, v)))
    if origin is dict:  # (its items are what a server reported: taken as they are)
        return lambda v: isinstance(v, dict)
    return lambda v: True  # (a type this reader does not check: the dataclass's own checks decide)


@functools.lru_cache(maxsize=None)
def _fields_of(cls: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(field name -> annotation, field name -> dataclasses.Field) of a dataclass, once per class."""
    return typing.get_type_hints(cls), {f.name: f for f in dataclasses.fields(cls)}


def _ann_text(ann: Any) -> str:
    names = {int: "a whole number", float: "a finite number", str: "a string", bool: "true or false",
             type(None): "null"}
    if ann in names:
        return names[ann]
    if typing.get_origin(ann) in (typing.Union, types.UnionType):
        return " or ".join(_ann_text(a) for a in typing.get_args(ann))
    if typing.get_origin(ann) is tuple:
        args = typing.get_args(ann)
        if len(args) == 2 and args[1] is Ellipsis:
            return f"a list, each {_ann_text(args[0])}"
        return f"[{', '.join(_ann_text(a) for a in args)}]"
    return str(ann)


def _as_tuples(value: Any, ann: Any) -> Any:
    """JSON lists turned into the tuples the annotation declares (nested too)."""
    if isinstance(value, list) and typing.get_origin(ann) in (tuple, typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(ann) if typing.get_origin(a) is tuple] or [ann]
        args = typing.get_args(inner[0])
        if args and len(args) == 2 and args[1] is Ellipsis:
            if typing.get_origin(args[0]) is None:  # (items of a plain type: the quick way)
                return tuple(value)
            return tuple(_as_tuples(v, args[0]) for v in value)
        return tuple(_as_tuples(v, a) for v, a in zip(value, args)) if args else tuple(value)
    return value


def dataclass_from(cls: Any, data: Any, finite: bool = True) -> Any:
    """``cls(**data)`` for a dataclass ``cls`` read from JSON, each field checked against its
    annotation first: the wrong type, an unknown or missing field is a ShapeError naming it.
    ``finite``: floats must be finite (False for measured values, where -inf is a logprob)."""
    if not isinstance(data, Mapping):
        raise ShapeError(f"{show_value(data)} is {_kind(data)}, not an object of {cls.__name__} fields")
    hints, fields = _fields_of(cls)
    for key in data:
        if key not in fields:
            near = difflib.get_close_matches(str(key), list(fields), n=1)
            raise ShapeError(f"{key}: not a known field (allowed: {', '.join(fields)}"
                             + (f"; did you mean {near[0]}?" if near else "") + ")", (str(key),))
    kwargs = {}
    for name, f in fields.items():
        if name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ShapeError(f"{name}: missing (it is required)", (name,))
            continue
        value = data[name]
        if not _checker(hints[name], finite)(value):
            raise ShapeError(f"{name} {show_value(value)} ({_kind(value)}): should be {_ann_text(hints[name])}",
                             (name,))
        kwargs[name] = _as_tuples(value, hints[name]) if type(value) is list else value
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as e:  # the dataclass's own checks (ranges, relations)
        raise ShapeError(str(e)) from None
