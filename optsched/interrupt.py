"""Ctrl-C as a deadline: the commands that report the best answer found so far (``solve``) run inside
:func:`interruptible`. SIGTERM (``kill``, a batch system's stop) is handled as SIGINT throughout.

The first SIGINT there sets :func:`requested`: every :class:`~optsched.budget.TimeBudget` expires
at once (the solvers' own checks between phases, policies, model rows and search levels stop
there), and each solver running inside :func:`stoppable` is told to stop (CP-SAT through
:func:`run_cpsat`, HiGHS through :mod:`optsched.mipsolvers`), so the command finishes with the
best schedule and bound it has, as at its time limit. A second SIGINT raises
:class:`KeyboardInterrupt` (the command aborts, exit 130).

A signal reaches Python's handler only when the main thread runs Python code, not while it waits
in a solver's C code; the SIGINT is therefore also written to a socket (``signal.set_wakeup_fd``)
that a watcher thread reads, which calls the registered stops at once. Outside
:func:`interruptible` nothing changes: Ctrl-C is Python's ``KeyboardInterrupt`` and CP-SAT
catches it itself.
"""

from __future__ import annotations

import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = [
    "EXIT_INTERRUPTED",
    "SIGNALS",
    "Interruption",
    "held_signals",
    "interruptible",
    "quiet_printed_interrupts",
    "raise_on_sigint",
    "requested",
    "run_cpsat",
    "sigint_seen",
    "stop_solvers",
    "stoppable",
]

#: Exit code of a command stopped by Ctrl-C with nothing to report (128 + SIGINT, the shells' convention).
EXIT_INTERRUPTED = 130

_requested = threading.Event()
_lock = threading.Lock()
_stops: list[Callable[[], Any]] = []
_signals = 0
_active = False
_seen = False


def sigint_seen() -> bool:
    """Whether a SIGINT reached :func:`raise_on_sigint`'s handler in this process: an exception
    raised while it unwinds (a C extension's import turns ``KeyboardInterrupt`` into an
    ``ImportError``) is then the interrupt, not an internal error."""
    return _seen


def _raise_interrupt(signum: int, frame: Any) -> None:
    global _seen
    _seen = True
    raise KeyboardInterrupt


#: The signals handled as Ctrl-C.
SIGNALS = (signal.SIGINT, signal.SIGTERM)


def raise_on_sigint() -> None:
    """Python's default SIGINT behaviour (``KeyboardInterrupt``), remembered by :func:`sigint_seen`,
    for SIGINT and SIGTERM alike (so that a terminated command unwinds: its temporary files are
    removed and its worker processes ended); nothing for a signal that is ignored (a background job)."""
    for signum in SIGNALS:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, _raise_interrupt)


def quiet_printed_interrupts() -> None:
    """Let :data:`sys.excepthook` print nothing for a :class:`KeyboardInterrupt` (other exceptions
    keep their traceback). A C extension that catches an exception prints it with ``PyErr_Print``,
    which calls the hook: numpy's ``import_array()``, run when an extension is imported, prints a
    ``KeyboardInterrupt`` that lands inside it, then raises ``ImportError``. The program reports the
    interrupt itself, in one line (:func:`optsched.launch.main`)."""
    printer = sys.excepthook

    def hook(kind: type[BaseException], value: BaseException, trace: Any) -> None:
        if not issubclass(kind, KeyboardInterrupt):
            printer(kind, value, trace)

    sys.excepthook = hook


@contextmanager
def held_signals() -> Iterator[None]:
    """Hold SIGINT and SIGTERM while the block runs and raise :class:`KeyboardInterrupt` at its end
    if one came (remembered by :func:`sigint_seen`): for imports of extensions that cannot be
    interrupted cleanly (``pydantic_core``'s Rust import panics when ``KeyboardInterrupt`` arrives
    inside it, and prints the panic before Python sees it). Outside the main thread, which no signal
    reaches, it holds nothing."""
    global _seen
    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        yield
        return
    held: list[int] = []

    def hold(signum: int, frame: Any) -> None:
        held.append(signum)

    previous = {
        signum: signal.signal(signum, hold) for signum in SIGNALS if signal.getsignal(signum) is not signal.SIG_IGN
    }
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if held:
        _seen = True
        raise KeyboardInterrupt


def requested() -> bool:
    """Whether Ctrl-C asked the running command to finish with what it has."""
    return _requested.is_set()


def _request() -> None:
    """Count one SIGINT; on the first, set :func:`requested` and call every registered stop."""
    global _signals
    with _lock:
        if not _active:  # a byte read after the block ended
            return
        _signals += 1
        first = not _requested.is_set()
        _requested.set()
        stops = list(_stops) if first else []
    for stop in stops:
        stop()


def _handler(signum: int, frame: Any) -> None:
    """Python's SIGINT handler inside :func:`interruptible` (the main thread, between bytecodes)."""
    if _signals >= 2:
        _raise_interrupt(signum, frame)
    if not _requested.is_set():  # the watcher has not seen the byte yet
        _request()


def _watch(sock: socket.socket) -> None:
    while True:
        try:
            data = sock.recv(64)
        except OSError:
            return
        if not data:
            return
        for _ in range(sum(data.count(signum.value) for signum in SIGNALS)):
            _request()


class Interruption:
    """What :func:`interruptible` yields: ``happened`` tells, during and after the block, whether
    Ctrl-C came."""

    happened: bool = False


@contextmanager
def interruptible() -> Iterator[Interruption]:
    """Run the block with Ctrl-C as a deadline (module docstring); only in the main thread, else
    the block runs unchanged. :func:`requested` is reset when the block ends; the yielded
    :class:`Interruption` keeps the answer for the caller to report."""
    global _active, _signals
    state = Interruption()
    if threading.current_thread() is not threading.main_thread():
        yield state
        return
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    previous_handlers: dict[int, Any] = {}
    previous_fd: int | None = None
    watcher = threading.Thread(target=_watch, args=(reader,), name="optsched-interrupt", daemon=True)
    try:
        with _lock:  # active before the handler: a SIGINT from the handler's first instant counts
            _requested.clear()
            _signals = 0
            _active = True
        for signum in SIGNALS:
            previous_handlers[signum] = signal.signal(signum, _handler)
        previous_fd = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        watcher.start()
        if _seen:
            # a KeyboardInterrupt raised before the block was swallowed (by an optional import's
            # ``except ImportError``): the command still stops at once, as at its first Ctrl-C
            _request()
        yield state
    finally:
        if previous_fd is not None:
            signal.set_wakeup_fd(previous_fd)
        for signum, handler in previous_handlers.items():
            signal.signal(signum, handler)
        writer.close()
        reader.shutdown(socket.SHUT_RDWR)
        if watcher.is_alive():
            watcher.join(timeout=1.0)
        reader.close()
        with _lock:
            _active = False
            state.happened = _requested.is_set()
            _requested.clear()


@contextmanager
def stoppable(stop: Callable[[], Any]) -> Iterator[bool]:
    """Call ``stop`` (a solver's own, thread-safe stop) if Ctrl-C comes while the block runs; at
    once when it came before. Yields whether :func:`interruptible` is active (then the solver
    should leave SIGINT to it)."""
    with _lock:
        _stops.append(stop)
        already = _requested.is_set()
    try:
        if already:
            stop()
        yield _active
    finally:
        with _lock:
            _stops.remove(stop)


def stop_solvers() -> None:
    """Call the stop of every solver now running inside :func:`stoppable` (from any thread), as
    Ctrl-C does but without asking the command to finish: a deadline that Python's signal handlers
    cannot deliver while the main thread waits in a solver's C code
    (:func:`optsched.report.alarm.alarm`). Each solver returns its best answer so far."""
    with _lock:
        stops = list(_stops)
    for stop in stops:
        stop()


def run_cpsat(solver: Any, model: Any, callback: Any = None) -> Any:
    """``solver.Solve(model, callback)``, stopped by Ctrl-C inside :func:`interruptible` (CP-SAT
    then returns its best solution so far, as at its time limit)."""
    with stoppable(solver.StopSearch) as active:
        if active:  # CP-SAT would catch SIGINT itself and swallow it: leave it to the watcher
            solver.parameters.catch_sigint_signal = False
        return solver.Solve(model, callback) if callback is not None else solver.Solve(model)
