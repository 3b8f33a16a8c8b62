"""The end of a time-limited command: :func:`exit_now` ends the process as soon as its outputs are
out, without the interpreter's teardown.

The teardown of a process that loaded the solvers (unloading OR-Tools, HiGHS and numba's
compiled code, collecting every module, joining the worker threads a search left running) takes
0.5-1.5 s on a 2-core machine, more under load, and a command's ``--time-limit`` bounds the whole
process. Everything a command writes is complete before it returns (files are written through a
temporary file and renamed, temporary folders are removed by their ``with`` blocks), so what is
left is flushing stdout and stderr and closing the logging handlers.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import NoReturn

__all__ = ["exit_now"]


def exit_now(code: int) -> NoReturn:
    """Flush stdout, stderr and the logging handlers, then end the process with ``code``
    (``os._exit``: no ``atexit`` handlers, no module teardown)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can reach it
            pass
    logging.shutdown()
    os._exit(code)
