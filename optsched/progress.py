"""Progress on stderr that is never silent and never goes backwards.

A :class:`Progress` has a fixed total (cells, rates, or the seconds of a time limit when it is a
``clock``) and a current step (:meth:`Progress.say`). On a terminal it is a rich progress bar
(the steps printed above it); elsewhere (stderr not a terminal, or no terminal width) each step
is one plain line ``[  elapsed s] message`` and, whenever no line was written for ``interval``
seconds, a line says how far it is (``label: done/total unit (pct %)``) and which step runs, so
that a log shows activity at a steady pace, the first second included (kernel compilation
too: the step that compiles is named before it starts). ``enabled=False`` (``--quiet``) writes
nothing. Nothing goes to stdout, which stays the JSON's.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from types import TracebackType
from typing import TextIO

__all__ = ["FIRST_LINE_SECONDS", "HEARTBEAT_SECONDS", "Progress", "is_terminal"]

#: Seconds without a line after which a plain-line progress writes one.
HEARTBEAT_SECONDS = 5.0
#: Seconds after which a progress that has said nothing yet shows itself.
FIRST_LINE_SECONDS = 1.0


def is_terminal(stream: TextIO) -> bool:
    """Whether ``stream`` is a terminal with a width (where a bar can be drawn)."""
    try:
        return stream.isatty() and os.get_terminal_size(stream.fileno()).columns > 0
    except (AttributeError, ValueError, OSError):
        return False


class Progress:
    """Progress of one command on stderr (see the module docstring).

    Parameters
    ----------
    label
        What is counted, e.g. ``"cells"`` or the command's name.
    total
        The fixed total (None: steps only, no count).
    unit
        The unit of ``total`` (``"s"`` for a clock).
    clock
        Count elapsed seconds against ``total`` (a time limit) instead of calls to :meth:`advance`.
    enabled
        False writes nothing.
    stream
        Where to write (default stderr).
    bar
        Draw a bar (default: when ``stream`` is a terminal).
    interval
        Seconds of silence after which a plain-line progress writes a line.
    first_interval
        Seconds after its creation at which a progress that has not written yet shows itself (the
        bar, or a status line): a command that fails at once on bad input writes its one error line
        only.
    started
        The ``time.perf_counter()`` from which the elapsed time counts (default: now), e.g. the
        program's start, from which a command's time limit counts.
    """

    def __init__(
        self,
        label: str,
        total: float | None = None,
        unit: str = "",
        *,
        clock: bool = False,
        enabled: bool = True,
        stream: TextIO | None = None,
        bar: bool | None = None,
        interval: float = HEARTBEAT_SECONDS,
        started: float | None = None,
        first_interval: float = FIRST_LINE_SECONDS,
    ) -> None:
        self.label, self.total, self.unit, self.clock = label, total, unit, clock
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self.interval = interval
        self.t0 = time.perf_counter() if started is None else started
        self.done = 0.0
        self.step = ""
        self._last_line = self.t0
        self.first_interval = first_interval
        self._said = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._bar = None
        self._task = None
        if not enabled:
            return
        self._want_bar = bar if bar is not None else is_terminal(self.stream)
        self._created = time.perf_counter()
        self._thread = threading.Thread(target=self._tick, name="optsched-progress", daemon=True)
        self._thread.start()

    def _start_bar(self) -> None:
        """Draw the bar (once)."""
        with self._lock:
            if self._bar is not None or self._stop.is_set():
                return
            self._draw_bar()

    def _draw_bar(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, TaskProgressColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as RichProgress

        console = Console(file=self.stream, highlight=False)
        columns = [TextColumn("{task.description}"), BarColumn()]
        if self.total is not None:
            columns += [TaskProgressColumn(), TextColumn(f"{{task.completed:.0f}}/{{task.total:.0f}} {self.unit}")]
        columns.append(TimeElapsedColumn())
        self._bar = RichProgress(*columns, console=console, transient=False, refresh_per_second=4)
        self._bar.start()
        self._task = self._bar.add_task(f"{self.label}: {self.step}" if self.step else self.label, total=self.total)

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def completed(self) -> float:
        """Units done so far (elapsed seconds, capped at the total, for a clock)."""
        if self.clock:
            return min(self.elapsed(), self.total) if self.total is not None else self.elapsed()
        return self.done

    def say(self, message: str) -> None:
        """Name the current step (a line of its own, above the bar on a terminal)."""
        self.step = message
        if not self.enabled:
            return
        if self._want_bar:
            self._start_bar()
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, description=f"{self.label}: {message}")
            self._bar.console.print(f"[{self.elapsed():7.1f}s] {message}", markup=False)
            self._refresh()
        else:
            self._line(message)

    __call__ = say

    def doing(self, message: str) -> None:
        """Name the step under way without a line of its own (the bar's description, or the next
        status line)."""
        self.step = message
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, description=f"{self.label}: {message}")

    def advance(self, n: float = 1) -> None:
        """Count ``n`` more units done (never more than the total)."""
        self.set_done(self.done + n)

    def set_done(self, n: float) -> None:
        """Set the units done; a smaller number than before is ignored (no going backwards)."""
        with self._lock:
            self.done = max(self.done, n if self.total is None else min(n, self.total))
        self._refresh()

    def status(self) -> str:
        """``label: done/total unit (pct %)``, then the current step."""
        done = self.completed()
        if self.total is None:
            count = f"{self.label}"
        else:
            pct = 100.0 * done / self.total if self.total > 0 else 100.0
            count = f"{self.label}: {done:.0f}/{self.total:.0f} {self.unit} ({pct:.0f} %)".replace("  (", " (")
        return f"{count}; {self.step}" if self.step else count

    def _refresh(self) -> None:
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, completed=self.completed())

    def _line(self, message: str) -> None:
        with self._lock:
            self._said = True
            print(f"[{self.elapsed():7.1f}s] {message}", file=self.stream, flush=True)
            self._last_line = time.perf_counter()

    def _tick(self) -> None:
        """Every quarter second: draw or move the bar, or write a status line after a silence."""
        while not self._stop.wait(min(0.25, self.interval)):
            now = time.perf_counter()
            if self._want_bar:
                if self._bar is None and now - self._created >= self.first_interval:
                    self._start_bar()
                self._refresh()
            elif self._said and now - self._last_line >= self.interval:
                self._line(self.status())
            elif not self._said and now - self._created >= self.first_interval:
                self._line(self.status())

    def close(self) -> None:
        """Stop the bar or the heartbeat (the bar stays on screen at its last state)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._bar is not None:
            if self.clock and self.total is not None:
                self._bar.update(self._task, completed=self.completed())
            self._bar.stop()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()
