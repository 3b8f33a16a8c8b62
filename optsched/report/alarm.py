"""The report's deadline inside a phase: :func:`alarm` raises :class:`TimeUp` when a time budget runs out.

A phase that cannot look at the clock itself (a policy's simulation, a bounder) runs inside
:func:`alarm`, which interrupts it with SIGALRM in the main thread; elsewhere (another thread, a
platform without ``setitimer`` and signal masks) the block runs to its end. Python runs the signal's handler only
when the main thread runs Python code, so at the deadline a timer thread also stops the solvers
running in C code (CP-SAT, HiGHS: :func:`optsched.interrupt.stop_solvers`; a policy's own CP-SAT
assignment, for one); each returns at once and the handler raises.
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

#: Seconds after which the alarm fires again when its exception was dropped (raised in a weakref
#: callback or a ``__del__``, where Python ignores exceptions).
REARM = 0.05


class TimeUp(BaseException):
    """The report's overall deadline passed during a phase (a BaseException, as KeyboardInterrupt:
    the ``except Exception`` of a phase that skips a failing part must not swallow it)."""


@contextmanager
def alarm(budget: TimeBudget) -> Iterator[None]:
    """Raise :class:`TimeUp` in the block when ``budget`` runs out (SIGALRM)."""
    left = budget.left()
    usable = (
        left is not None
        and hasattr(signal, "setitimer")
        and hasattr(signal, "pthread_sigmask")
        and hasattr(signal, "sigwait")
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
        # exception and drops it ("Exception ignored in ..."), so the timer fires again until one
        # lands; not while one is being handled (the block unwinding to its end, which stops the
        # timer): a second TimeUp raised there, in contextlib's exit before the block's cleanup,
        # would skip that cleanup and leave the timer and this handler in place
        signal.setitimer(signal.ITIMER_REAL, REARM)
        if not isinstance(sys.exc_info()[1], TimeUp):
            raise TimeUp

    previous = signal.signal(signal.SIGALRM, handler)
    stopper = threading.Timer(left, stop_solvers)
    stopper.daemon = True
    try:  # armed inside: a TimeUp before the block (a deadline met while the stopper starts) is cleaned up too
        stopper.start()
        signal.setitimer(signal.ITIMER_REAL, left)
        yield
    finally:
        while True:  # the handler may raise again before the timer is stopped: stop it again
            try:
                _disarm(stopper, previous)
                break
            except TimeUp:
                continue


def _disarm(stopper: threading.Timer, previous: Any) -> None:
    """Stop the timer and the stopper and restore the ``previous`` handler, with no SIGALRM left
    behind (one reaching a default handler would end the process; one reaching Python once its
    handler is no longer this alarm's is reported as "ignored due to race condition"): SIGALRM is
    held while the timer stops and one the kernel still holds is taken; one that reached Python's
    own handler already runs this alarm's handler at the next Python call (:func:`_checkpoint`),
    whose TimeUp the caller's loop takes (it stops the timer again)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    try:
        signal.setitimer(signal.ITIMER_REAL, 0)
        stopper.cancel()
        if signal.SIGALRM in signal.sigpending():
            signal.sigwait({signal.SIGALRM})
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGALRM})
    _checkpoint()
    signal.signal(signal.SIGALRM, previous)


def _checkpoint() -> None:
    """Nothing: CPython runs the Python handlers of the signals that have arrived when a Python
    function starts, so calling this runs a pending SIGALRM's handler here."""
