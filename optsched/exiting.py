"""The end of a time-limited command: :func:`exit_now` ends the process as soon as its outputs are
out, without the interpreter's teardown, and :func:`end_at` ends it at its time limit when the
command has not ended by then.

The teardown of a process that loaded the solvers (unloading OR-Tools, HiGHS and numba's
compiled code, collecting every module, joining the worker threads a search left running) takes
0.5-1.5 s on a 2-core machine, more under load, and a command's ``--time-limit`` bounds the whole
process. Everything a command writes is complete before it returns (files are written through a
temporary file and renamed, temporary folders are removed by their ``with`` blocks), so what is
left is flushing stdout and stderr and closing the logging handlers.

A command's own deadline checks end it within its limit; :func:`end_at` is the bound of the
process that holds whatever the command does (a phase without checks, a method that cannot be
stopped): at the deadline it writes one line and ends the process with :data:`EXIT_TIME_LIMIT`.
An output file being written (:func:`exit_held`, around every temporary-file-and-rename write)
is completed first, so that no file is left half-written or temporary. The ending runs in a
thread, so a phase that holds the interpreter's lock (a numba kernel being compiled) delays it.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import NoReturn

from .budget import TimeBudget

__all__ = ["EXIT_TIME_LIMIT", "end_at", "exit_held", "exit_now"]

#: Exit code of a command ended by :func:`end_at` at its time limit, before it had anything to
#: report (the convention of GNU ``timeout``).
EXIT_TIME_LIMIT = 124

_state = threading.Condition()
_writing = 0  # outputs being written (exit_held blocks)
_ending = False  # the process is ending: exit_now or end_at has begun


def exit_now(code: int) -> NoReturn:
    """Flush stdout, stderr and the logging handlers, then end the process with ``code``
    (``os._exit``: no ``atexit`` handlers, no module teardown)."""
    global _ending
    with _state:  # an end_at ending at this moment ends the process with its own code
        _ending = True
    _flush()
    os._exit(code)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can reach it
            pass
    logging.shutdown()


@contextmanager
def exit_held() -> Iterator[None]:
    """Hold :func:`end_at`'s ending while the block writes an output (it ends the process once
    the block is done); blocks while the process is ending."""
    global _writing
    with _state:
        _writing += 1
    try:
        yield
    finally:
        with _state:
            _writing -= 1
            _state.notify_all()


def end_at(budget: TimeBudget, message: str) -> Callable[[], None]:
    """End the process when ``budget`` (with a limit) runs out: write ``message`` on stderr and
    exit with :data:`EXIT_TIME_LIMIT` (:func:`exit_now`'s flushes), unless the returned function
    was called first (the command ended). A daemon thread waits for the end."""
    cancelled = threading.Event()
    wait = budget.left()

    def watch() -> None:
        global _ending
        if cancelled.wait(wait):
            return
        with _state:  # held to the end: no output starts once the ending has begun
            while _writing:
                _state.wait()
            if _ending or cancelled.is_set():
                return
            _ending = True
            print(message, file=sys.stderr)
            _flush()
            os._exit(EXIT_TIME_LIMIT)

    threading.Thread(target=watch, name="optsched-time-limit", daemon=True).start()
    return cancelled.set
