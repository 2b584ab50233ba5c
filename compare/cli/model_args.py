"""Command-line options declared once, as fields of a frozen pydantic model; argparse is made from it.

Each field is one option: its default, its constraint (``ge``/``gt``/``lt``, a ``Literal`` for
choices) and its help text live on the field (:func:`opt`); :func:`add_options` adds the matching
argparse arguments, and :meth:`CliModel.of` reads them back into the model, so the help, the
default and the range check have one source. A value the model refuses is one line naming the flag
(:class:`core.errors.UserError`, exit 2).
"""
from __future__ import annotations

import argparse
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.errors import UserError

M = TypeVar("M", bound="CliModel")


def opt(default: Any = None, help: str | None = None, *, flag: str | None = None, short: str | None = None,
        metavar: str | None = None, group: str | None = None, parse: Callable[[str], Any] | None = None,
        append: bool = False, fix: str | None = None, says: str | None = None,
        default_factory: Callable[[], Any] | None = None, **constraint: Any) -> Any:
    """One option: a pydantic Field with the command line's own details beside it.
    ``flag``: the option (default ``--field-name``); ``group``: its --help section; ``parse``: an
    argparse type of its own; ``append``: repeatable, collected as a list; ``fix``: what to do,
    said after a refused value; ``says``: the whole refusal, formatted with {flag} and {value} (a
    ``Literal`` with ``says`` is checked by the model, not by argparse's choices)."""
    cli = {k: v for k, v in dict(flag=flag, short=short, metavar=metavar, group=group, parse=parse,
                                 append=append, fix=fix, says=says).items() if v}
    if default_factory is not None:
        return Field(default_factory=default_factory, description=help, json_schema_extra={"cli": cli},
                     **constraint)
    return Field(default, description=help, json_schema_extra={"cli": cli}, **constraint)


def _cli(field: Any) -> dict[str, Any]:
    extra = field.json_schema_extra
    return dict(extra.get("cli", {})) if isinstance(extra, dict) else {}


def flag_of(model: type[BaseModel], name: str) -> str:
    return _cli(model.model_fields[name]).get("flag") or "--" + name.replace("_", "-")


def _plain(annotation: Any) -> Any:
    """The field's type without ``| None``."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return rest[0] if len(rest) == 1 else annotation
    return annotation


def add_options(p: argparse.ArgumentParser, model: type[BaseModel], order: tuple[str, ...] = ()) -> None:
    """argparse arguments for every field of ``model``, each in its --help group: the groups in
    ``order`` first (options without a group before them), then the others as they come."""
    fields = list(model.model_fields.items())
    rank = {g: i for i, g in enumerate(order)}
    fields.sort(key=lambda f: -1 if not _cli(f[1]).get("group") else rank.get(_cli(f[1])["group"], len(rank)))
    groups: dict[str, Any] = {}
    for name, field in fields:
        cli = _cli(field)
        where: Any = p
        if cli.get("group"):
            where = groups.get(cli["group"]) or groups.setdefault(cli["group"], p.add_argument_group(cli["group"]))
        kind = _plain(field.annotation)
        default = None if field.is_required() else field.get_default(call_default_factory=True)
        kw: dict[str, Any] = {"dest": name, "help": field.description}
        if field.is_required():  # a field without a default is a required option
            kw["required"] = True
        if cli.get("metavar"):
            kw["metavar"] = cli["metavar"]
        if kind is bool:
            kw["action"] = "store_true"
        elif cli.get("append"):
            kw.update(action="append", default=list(default) if default is not None else None)
        else:
            kw["default"] = default
            if typing.get_origin(kind) is Literal and not cli.get("says"):  # with says: the model's words
                kw["choices"] = list(typing.get_args(kind))
            elif cli.get("parse"):
                kw["type"] = cli["parse"]
            elif kind in (int, float, Path):
                kw["type"] = kind
        flags = [x for x in (cli.get("short"), flag_of(model, name)) if x]
        where.add_argument(*flags, **kw)


def _rule(err: Any) -> str:
    ctx = err.get("ctx") or {}
    for key, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
        if key in ctx:
            bound = ctx[key]
            return f"{sign} {bound:g}" if isinstance(bound, (int, float)) else f"{sign} {bound}"
    if err["type"] == "literal_error":
        return f"one of {ctx.get('expected', '')}".replace("'", "")
    return str(err["msg"]).removeprefix("Value error, ")


class CliModel(BaseModel):
    """A command's options, typed and checked; frozen (nothing after the edge changes them)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @classmethod
    def of(cls: type[M], args: argparse.Namespace) -> M:
        """The options as parsed; a value the model refuses: one line naming the flag."""
        data = {name: getattr(args, name) for name in cls.model_fields if hasattr(args, name)}
        try:
            return cls(**data)
        except ValidationError as e:
            err = e.errors()[0]
            raise UserError(cls.refusal(err, data)) from None

    @classmethod
    def refusal(cls, err: Any, data: dict[str, Any]) -> str:
        loc = err.get("loc") or ()
        name = str(loc[0]) if loc else ""
        if name not in cls.model_fields:  # a check of several options together: its own words
            return str(err["msg"]).removeprefix("Value error, ")
        cli, value = _cli(cls.model_fields[name]), data.get(name)
        shown = f"{value:g}" if isinstance(value, float) else str(value)
        flag = flag_of(cls, name)
        if cli.get("says"):
            return cli["says"].format(flag=flag, value=shown)
        fix = f" ({cli['fix']})" if cli.get("fix") else ""
        return f"{flag} must be {_rule(err)}{fix}, got {shown}"
