"""The event loop every measuring command runs on.

uvloop when it is importable (vLLM's own OpenAI server runs on it; it is a vLLM dependency, so
it is there wherever vLLM is): its callbacks, futures and socket reads cost a fraction of
asyncio's, and in the in-process backend the load generator shares its loop with vLLM's
frontend (AsyncLLM output handling), so every microsecond per token shows up as client delay.
``LLM_COMPARE_LOOP=asyncio`` forces the standard loop (for A/B measurements of the harness).
The loop actually used is recorded in run.json (``client.event_loop``).
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
from typing import Any, Coroutine, Iterator, TypeVar

T = TypeVar("T")
CHOICES = ("auto", "uvloop", "asyncio")


def loop_choice() -> str:
    choice = os.environ.get("LLM_COMPARE_LOOP", "auto").strip().lower() or "auto"
    if choice not in CHOICES:
        from core.errors import UserError
        raise UserError(f"LLM_COMPARE_LOOP={choice!r} is not one of {', '.join(CHOICES)} "
                        f"(unset it to use uvloop when installed)")
    return choice


def run(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on uvloop when available (or as ``LLM_COMPARE_LOOP`` says), under the signal
    policy below: a stop signal cancels ``coro`` and is raised here as :class:`SignalInterrupt`
    once it has unwound (also when it arrived during a final teardown that ``coro`` finished)."""
    from containers.watchdog import start_reaper

    start_reaper()  # kills this process's engines and servers if it dies without cleaning up
    try:
        result = _run(_policed(coro))
    except asyncio.CancelledError:
        if _P.signum is None:
            raise
        raise SignalInterrupt(_P.signum) from None
    if _P.signum is not None:  # it came while the last teardown ran, which was finished
        raise SignalInterrupt(_P.signum, "the run had finished; its teardown was completed")
    return result


async def _policed(coro: Coroutine[Any, Any, T]) -> T:
    _P.task, _P.loop = asyncio.current_task(), asyncio.get_running_loop()
    try:
        if _P.signum is not None:  # arrived before the loop started
            coro.close()
            raise asyncio.CancelledError()
        return await coro
    finally:
        _P.task = _P.loop = None


def run_loop(coro: Coroutine[Any, Any, T]) -> T:
    """The loop ``run`` uses, without its signal policy or reaper: for the client processes of a
    sharded level (compare/running/multiproc_worker.py), whose parent owns both."""
    return _run(coro)


def _run(coro: Coroutine[Any, Any, T]) -> T:
    choice = loop_choice()
    if choice != "asyncio":
        try:
            import uvloop
        except ImportError:
            if choice == "uvloop":
                coro.close()
                from core.errors import UserError
                raise UserError("LLM_COMPARE_LOOP=uvloop but uvloop is not installed "
                                "(pip install uvloop, or unset LLM_COMPARE_LOOP)") from None
        else:
            # what uvloop.run does, without needing uvloop >= 0.18
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                return runner.run(coro)
    return asyncio.run(coro)


def running_loop_name() -> str:
    """e.g. ``uvloop`` or ``asyncio``: the implementation of the loop we are running on."""
    loop = asyncio.get_running_loop()
    return type(loop).__module__.split(".")[0]


# ---------------------------------------------------------------- the signal policy
#
# SIGINT, SIGTERM and SIGHUP stop the program the same way. While a measuring coroutine runs
# (``run`` above), the first signal cancels it: the executor stops sending, cancels the requests
# in flight and keeps them as cancelled records, the runner summarises what was measured and tears
# every engine, server and container down (teardown is never cut short: later signals only say
# that it is under way), then ``run`` raises :class:`SignalInterrupt`. Outside a measuring
# coroutine a signal raises :class:`SignalInterrupt` at once. The CLI exits with 128 + the signal
# number (130 SIGINT, 143 SIGTERM, 129 SIGHUP). A process killed outright (SIGKILL) cannot clean up:
# containers/watchdog.py reaps what it leaves.

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class SignalInterrupt(KeyboardInterrupt):
    """The program was stopped by a signal; ``note`` says what state the results were left in.

    A KeyboardInterrupt so that no ``except Exception`` between the signal and the CLI swallows it."""

    def __init__(self, signum: int, note: str = "") -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.note = note

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class _Policy:
    installed = False
    signum: int | None = None  # the first stop signal received
    task: asyncio.Task | None = None  # the measuring coroutine a signal cancels
    loop: asyncio.AbstractEventLoop | None = None
    deferred = 0  # > 0 while teardown runs: a signal waits for it
    exiting = False  # the program is exiting: its exit-time teardown runs to its end
    previous: dict = {}
    fork_hook = False
    err_fd = 2  # the user's stderr, duplicated at install: engine logs may take fd 2 meanwhile


_P = _Policy()


def install_signal_policy() -> None:
    """Route SIGINT/SIGTERM/SIGHUP through the policy (main thread only; the CLI calls this)."""
    if _P.installed or threading.current_thread() is not threading.main_thread():
        return
    _P.previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    for s in STOP_SIGNALS:
        signal.signal(s, _on_signal)
    try:
        _P.err_fd = os.dup(2)
        os.set_inheritable(_P.err_fd, False)
    except OSError:
        pass
    # a forked child (vLLM's engine core and workers fork) must not run our policy on a copy of
    # this process's state: it gets the default handlers back (vLLM installs its own after that)
    if not _P.fork_hook:
        os.register_at_fork(after_in_child=_reset_in_child)
        _P.fork_hook = True
    _P.installed = True


def uninstall_signal_policy() -> None:
    """The handlers before :func:`install_signal_policy` come back (in-process callers)."""
    if _P.installed and threading.current_thread() is threading.main_thread():
        for s, h in _P.previous.items():
            signal.signal(s, h)
        _P.installed = False
        if _P.err_fd != 2:  # the duplicate install made (one per install: not left open)
            try:
                os.close(_P.err_fd)
            except OSError:
                pass
            _P.err_fd = 2
    _P.signum = None


def _reset_in_child() -> None:
    for s in STOP_SIGNALS:
        if signal.getsignal(s) is _on_signal:
            signal.signal(s, signal.default_int_handler if s == signal.SIGINT else signal.SIG_DFL)
    _P.installed = False
    _P.task = _P.loop = None


def _say(text: str) -> None:
    try:
        os.write(_P.err_fd, (text + "\n").encode())  # never print() from a signal handler (reentrancy)
    except OSError:
        pass


def _on_signal(signum: int, frame: object) -> None:
    name = signal.Signals(signum).name
    first = _P.signum is None
    if first:
        _P.signum = signum
    if _P.exiting:
        _say(f"{name}: finishing teardown before exiting")
        return
    task = _P.task
    if task is not None and not task.done():
        if not first:
            _say(f"{name}: already stopping; tearing down engines, servers and containers")
        elif _P.deferred:
            _say(f"{name}: stopping after the teardown under way")
        else:  # the one line the user sees comes at exit, with the state of the results
            task.cancel()
            if _P.loop is not None:
                _P.loop.call_soon_threadsafe(lambda: None)  # wake the loop if it sleeps
        return
    if first:
        raise SignalInterrupt(signum)


def stop_signal() -> int | None:
    """The stop signal received so far (None: none)."""
    return _P.signum


def check_stop() -> None:
    """Between pieces of work: honour a signal that arrived while a teardown held it back."""
    if _P.signum is not None and _P.task is not None:
        raise asyncio.CancelledError()


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Teardown (engines, servers, containers) runs to its end: signals are noted, not acted on."""
    _P.deferred += 1
    try:
        yield
    finally:
        _P.deferred -= 1


def exiting() -> None:
    """From here on signals only say that exit-time teardown is finishing."""
    _P.exiting = True

