"""The report's deadline inside a phase: :func:`alarm` raises :class:`TimeUp` when a time budget runs out.

A phase that cannot look at the clock itself (a policy's simulation, a bounder) runs inside
:func:`alarm`: at the deadline a timer thread sends SIGALRM to the main thread (to that thread
only, ``pthread_kill``; a process-wide signal may be taken by any thread), whose handler raises.
Elsewhere (another thread, a platform without ``pthread_kill`` and signal masks) the block runs to
its end. Python runs the signal's handler only when the main thread runs Python code, so the timer
thread first stops the solvers running in C code (CP-SAT, HiGHS:
:func:`optsched.interrupt.stop_solvers`; a policy's own CP-SAT assignment, for one); each returns
at once and the handler raises.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..budget import TimeBudget
from ..interrupt import stop_solvers

__all__ = ["REARM", "TimeUp", "alarm"]

#: Seconds after which the alarm fires again while the block runs on (its exception was dropped:
#: raised in a weakref callback or a ``__del__``, where Python ignores exceptions).
REARM = 0.05


class TimeUp(BaseException):
    """The report's overall deadline passed during a phase (a BaseException, as KeyboardInterrupt:
    the ``except Exception`` of a phase that skips a failing part must not swallow it)."""


class _MainThreadAlarm:
    """A thread that, ``left`` seconds after :meth:`start`, stops the solvers and then sends SIGALRM
    to the main thread every :data:`REARM` seconds until :meth:`disarm`; none is sent after it."""

    def __init__(self, left: float) -> None:
        self.left = left
        self.main = threading.main_thread().ident
        self.disarmed = threading.Event()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self.run, name="optsched-alarm", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def run(self) -> None:
        if self.disarmed.wait(self.left):
            return
        stop_solvers()
        while True:
            with self.lock:
                if self.disarmed.is_set():
                    return
                assert self.main is not None
                signal.pthread_kill(self.main, signal.SIGALRM)
            if self.disarmed.wait(REARM):
                return

    def disarm(self) -> None:
        with self.lock:
            self.disarmed.set()
        if self.thread.is_alive() and self.thread is not threading.current_thread():
            self.thread.join()


@contextmanager
def alarm(budget: TimeBudget) -> Iterator[None]:
    """Raise :class:`TimeUp` in the block when ``budget`` runs out (SIGALRM)."""
    left = budget.left()
    usable = (
        left is not None
        and hasattr(signal, "pthread_kill")
        and hasattr(signal, "pthread_sigmask")
        and hasattr(signal, "sigtimedwait")
        and threading.current_thread() is threading.main_thread()
    )
    if not usable:
        yield
        return
    assert left is not None
    if left <= 0:
        raise TimeUp

    def handler(signum: int, frame: Any) -> None:
        # raised where the signal lands: inside a weakref callback or a __del__, Python prints the
        # exception and drops it ("Exception ignored in ..."), so the signal comes again until one
        # lands; not while one is being handled (the block unwinding to its end, which disarms the
        # alarm): a second TimeUp raised there, in contextlib's exit before the block's cleanup,
        # would skip that cleanup and leave this handler in place
        if not isinstance(sys.exc_info()[1], TimeUp):
            raise TimeUp

    previous = signal.signal(signal.SIGALRM, handler)
    timer = _MainThreadAlarm(left)
    try:  # started inside: a TimeUp before the block (a deadline met while the thread starts) is cleaned up too
        timer.start()
        yield
    finally:
        while True:  # the handler may raise before the alarm is disarmed: disarm it again
            try:
                _disarm(timer, previous)
                break
            except TimeUp:
                continue


def _disarm(timer: _MainThreadAlarm, previous: Any) -> None:
    """Stop the ``timer`` and restore the ``previous`` handler, with no SIGALRM left behind (one
    reaching a default handler would end the process; one reaching Python once its handler is no
    longer this alarm's is reported as "ignored due to race condition"): SIGALRM is held while the
    timer stops and one still pending for the main thread is taken (only the main thread receives
    it, so it is either pending there or already handled); one that reached Python's own handler
    already runs this alarm's handler at the next Python call (:func:`_checkpoint`), whose TimeUp
    the caller's loop takes (it disarms again)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    try:
        timer.disarm()
        signal.sigtimedwait({signal.SIGALRM}, 0)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGALRM})
    _checkpoint()
    signal.signal(signal.SIGALRM, previous)


def _checkpoint() -> None:
    """Nothing: CPython runs the Python handlers of the signals that have arrived when a Python
    function starts, so calling this runs a pending SIGALRM's handler here."""
