"""The argument parser every ``compare`` command uses: argparse's own errors in the program's form.

argparse prints the whole usage (20+ lines for ``compare run``) before the line that matters. Here
every parse error is the one line the program's own errors are: the option, the value, what is
allowed, and where the help is, exit 2. Numbers are checked as they are parsed: a float option
never takes nan or inf, an integer option never takes a value no counter could hold.
"""
from __future__ import annotations

import argparse
import math
import re
from typing import NoReturn

INT_LIMIT = 2**63  # an int option's magnitude: beyond it no JSON reader, numpy or engine agrees


def _float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number (nan and inf are not allowed)")
    return v


def _int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if abs(v) >= INT_LIMIT:
        raise argparse.ArgumentTypeError(f"{text!r} is too large (at most {INT_LIMIT - 1})")
    return v


def run_id(text: str) -> str:
    """``--run-id``: one name under the results root (core/results/io.py says what a name is)."""
    from core.results.io import run_id_problem

    problem = run_id_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(f"{text!r}: {problem}")
    return text


_ARG = re.compile(r"argument (?P<opt>[^:]+): (?P<rest>.*)", re.S)
_CHOICE = re.compile(r"invalid choice: (?P<value>.*?) \(choose from (?P<choices>.*)\)", re.S)
_CONVERT = re.compile(r"invalid (?P<type>\w+) value: (?P<value>.*)", re.S)


def short_error(message: str) -> str:
    """argparse's message as the program's: ``--format 'xx': not one of table, json, md, html``."""
    m = _ARG.fullmatch(message.strip())
    if not m:
        return message.strip()
    opt, rest = m["opt"].split("/")[-1], m["rest"]  # "-q/--quiet" -> "--quiet"
    opt = "command" if opt == "COMMAND" else opt
    if c := _CHOICE.fullmatch(rest):
        choices = ", ".join(x.strip().strip("'") for x in c["choices"].split(","))
        return f"{opt} {c['value']}: not one of {choices}"
    if c := _CONVERT.fullmatch(rest):
        kind = {"int": "a whole number", "float": "a number"}.get(c["type"], f"a valid {c['type']}")
        return f"{opt} {c['value']}: not {kind}"
    return f"{opt} {rest}"


class Parser(argparse.ArgumentParser):
    """argparse, with one-line errors and checked numbers; subcommands inherit both."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # type=float / type=int anywhere under this parser (argument groups share the registry)
        self.register("type", float, _float)
        self.register("type", int, _int)

    def error(self, message: str) -> NoReturn:
        prog = self.prog
        if message.startswith("unrecognized arguments") and self.command:
            prog = f"{prog} {self.command}"  # extras come back to the top parser: name the command
        self.exit(2, f"error: {short_error(message)} (see `{prog} --help`)\n")

    command: str | None = None  # the command being parsed, set by main before parsing
