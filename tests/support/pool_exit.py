"""A forced order of the race between ``concurrent.futures``' exit hook and a process pool's
manager thread (tests/sweep/test_sweep_exit.py).

The exit hook (``concurrent.futures.process._python_exit``, run by the interpreter's exit) wakes
every pool manager thread: it checks that the thread's wake-up pipe is open, then writes to it. A
manager thread still running closes that pipe when it ends. :func:`force_the_order` makes the
close wait (up to 2 s) until the hook has checked, and the hook pause 0.3 s after its check, so
that a manager thread still running at the exit closes the pipe inside the hook's window every
time instead of about once in 190 runs.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import process

#: Set by the caller when the interpreter's exit (or its stand-in) begins.
EXITING = threading.Event()
_CHECKED = threading.Event()


def force_the_order() -> None:
    """Patch the stdlib's wake-up pipe as the module docstring says."""
    wakeup_type = process._ThreadWakeup  # noqa: SLF001 - the stdlib's race is the subject
    close = wakeup_type.close

    def wakeup(self: object) -> None:
        if not self._closed:
            if EXITING.is_set():
                _CHECKED.set()
                time.sleep(0.3)
            self._writer.send_bytes(b"")

    def closing(self: object) -> None:
        _CHECKED.wait(2.0)
        close(self)

    wakeup_type.wakeup = wakeup
    wakeup_type.close = closing


def exit_hook_wakeups() -> None:
    """What the exit hook does: wake every pool manager thread still registered."""
    EXITING.set()
    for wakeup in list(process._threads_wakeups.values()):  # noqa: SLF001
        wakeup.wakeup()
