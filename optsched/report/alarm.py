"""The report's deadline inside a phase: :func:`alarm` raises :class:`TimeUp` when a time budget runs out.

A phase that cannot look at the clock itself (a policy's simulation, a bounder) runs inside
:func:`alarm`, which interrupts it with SIGALRM in the main thread; elsewhere (another thread, a
platform without ``setitimer``) the block runs to its end. Python runs the signal's handler only
when the main thread runs Python code, so at the deadline a timer thread also stops the solvers
running in C code (CP-SAT, HiGHS: :func:`optsched.interrupt.stop_solvers`; a policy's own CP-SAT
assignment, for one); each returns at once and the handler raises.
"""

from __future__ import annotations

import signal
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
    usable = left is not None and hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if not usable:
        yield
        return
    assert left is not None
    if left <= 0:
        raise TimeUp

    def handler(signum: int, frame: Any) -> None:
        # raised where the signal lands: inside a weakref callback or a __del__, Python prints the
        # exception and drops it ("Exception ignored in ..."), so the timer fires again until one lands
        signal.setitimer(signal.ITIMER_REAL, REARM)
        raise TimeUp

    previous = signal.signal(signal.SIGALRM, handler)
    stopper = threading.Timer(left, stop_solvers)
    stopper.daemon = True
    signal.setitimer(signal.ITIMER_REAL, left)
    stopper.start()
    try:
        yield
    finally:
        stopper.cancel()
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
