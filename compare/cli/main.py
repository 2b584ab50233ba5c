"""``compare`` / ``llm-compare`` command line.

Each subcommand lives in its own module under compare/cli/commands/ and registers itself through
``add_parser(subparsers)``; this file only wires them and maps errors to exit codes:
0 ok, 1 a run that measured but did not complete (or a regression, for ``check``),
2 bad input (one line, no traceback) and a file that could not be written (a full disk: nothing
half-written is left), 128 + the signal when stopped by one: 130 SIGINT (Ctrl-C),
143 SIGTERM, 129 SIGHUP (compare/running/aio.py: one policy for all three).
"""
from __future__ import annotations

import argparse
import errno
import importlib
import os
import signal
import sys

from compare import __version__
from compare.cli.parser import Parser
from core.errors import LLMCompareError, UserError
from core.process_exit import exit_without_teardown

# module names under compare.cli.commands; each defines add_parser(subparsers). Modules not
# written yet are skipped, so features land independently.
COMMANDS = ["run", "plan", "backends", "model", "calibrate", "containers", "clean", "cache", "report",
            "baseline", "check", "quant", "quantize", "tune", "bundle", "merge"]


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line, or (``only``) the top level and that one command: a command's run
    imports what it uses, not the other commands' modules (~0.1 s of a process's start)."""
    p = Parser(
        prog="compare",
        description="Compare LLM serving frameworks on identical workloads: TTFT, TPOT, ITL, "
                    "throughput, goodput under an SLO, quality.")
    p.add_argument("--version", action="version", version=f"llm-compare {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for name in [only] if only else COMMANDS:
        mod = f"compare.cli.commands.{name}"
        try:
            module = importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name != mod:
                raise
            continue
        module.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    code = _guarded(argv)
    if argv is None and "torch" in sys.modules:  # the program itself, with an engine's heap
        exit_without_teardown(code)
    return code


def _guarded(argv: list[str] | None) -> int:
    from compare.running.aio import exiting, install_signal_policy, uninstall_signal_policy

    install_signal_policy()
    try:
        return _main(argv)
    except KeyboardInterrupt as e:  # SIGINT, SIGTERM, SIGHUP: one line, 128 + the signal
        signum = getattr(e, "signum", signal.SIGINT)
        note = getattr(e, "note", "") or "stopped"
        print(f"interrupted by {signal.Signals(signum).name}: {note}", file=sys.stderr)
        return 128 + signum
    finally:
        if argv is None:  # the program itself: its exit-time teardown (atexit) is not cut short
            exiting()
        else:  # called in-process (tests): the caller's own handlers come back
            uninstall_signal_policy()


def _main(argv: list[str] | None) -> int:
    given = sys.argv[1:] if argv is None else argv
    # a command named first needs only its own parser; anything else (no command: the embedded
    # default run, --help, --version, a misspelt command) gets the whole line and its choices
    parser = build_parser(given[0] if given and given[0] in COMMANDS else None)
    parser.command = next((a for a in given if a in COMMANDS), None)  # named in an unrecognized-option line
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        # `compare` with no command: the embedded default run
        args = parser.parse_args(["run", *(argv or [])])
    try:
        return int(args.func(args) or 0)
    except LLMCompareError as e:  # the program's own errors: one line, their exit code
        # bad input is one line (a run's SLO misses are one line each: kept as they are)
        print(f"error: {_one_line(str(e)) if isinstance(e, UserError) else e}", file=sys.stderr)
        return e.exit_code
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as e:
        if e.errno not in _DISK_ERRNOS:
            raise
        # a file the command writes (a report, a baseline, a tune) hit a full disk or a quota:
        # each is written atomically, so nothing half-written is left; a run's results have their
        # own handling (run.json says "failed", what was measured is kept, exit 1)
        from core.fsutil import disk_problem

        where = f" {e.filename}" if e.filename else ""
        print(f"error: cannot write{where}: {disk_problem(e)}; free space on that disk (or write elsewhere) "
              f"and run the command again; nothing was written", file=sys.stderr)
        return 2


def _one_line(text: str) -> str:
    """A message as one line of visible text: a value it quotes from a file or a flag (a name
    holding a NUL, a newline, an escape sequence) is shown escaped, never sent to the terminal."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


# a full disk, a quota, a file-size limit, a read-only file system
_DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})


if __name__ == "__main__":
    sys.exit(main())
