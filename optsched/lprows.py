"""Rows of a HiGHS linear programme gathered as numpy blocks and passed in one ``addRows`` call.

The load-aware bounds build their programmes (:mod:`optsched.load_bounds`' busy-time LP,
:mod:`optsched.fluid_bounds`, :mod:`optsched.pair_wait_lp`) a block of rows at a time; this is the
one place that turns those blocks into HiGHS' row-wise matrix.
"""

from __future__ import annotations

import numpy as np

__all__ = ["LpRows"]


class LpRows:
    """Rows (lower, upper) and their entries (row, column, value), gathered for one ``addRows`` call."""

    def __init__(self) -> None:
        self.lower: list[np.ndarray] = []
        self.upper: list[np.ndarray] = []
        self.entries: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.count = 0

    def add(self, lower: np.ndarray, upper: np.ndarray) -> int:
        """Add ``len(lower)`` rows; return the index of the first."""
        first = self.count
        self.lower.append(np.atleast_1d(np.asarray(lower, dtype=np.float64)))
        self.upper.append(np.atleast_1d(np.asarray(upper, dtype=np.float64)))
        self.count += len(self.lower[-1])
        return first

    def put(self, rows: np.ndarray | int, cols: np.ndarray, vals: np.ndarray | float) -> None:
        """Entries of rows already added (``rows`` and ``vals`` broadcast to ``cols``' shape where scalar)."""
        cols = np.atleast_1d(np.asarray(cols, dtype=np.int64))
        rows = np.broadcast_to(np.asarray(rows, dtype=np.int64), cols.shape)
        self.entries.append((rows, cols, np.broadcast_to(np.asarray(vals, dtype=np.float64), cols.shape)))

    def row(self, lower: float, upper: float, cols: np.ndarray, vals: np.ndarray) -> None:
        """One row ``lower <= sum vals * cols <= upper``."""
        self.put(self.add(np.array([lower]), np.array([upper])), cols, vals)

    def pass_to(self, h: object) -> object:
        """Add the rows to HiGHS model ``h``; HiGHS' status (an error for a repeated entry of a row)."""
        rows = np.concatenate([e[0] for e in self.entries])
        order = np.argsort(rows, kind="stable")
        cols = np.concatenate([e[1] for e in self.entries])[order].astype(np.int32)
        vals = np.concatenate([e[2] for e in self.entries])[order]
        starts = np.searchsorted(rows[order], np.arange(self.count)).astype(np.int32)
        lower, upper = np.concatenate(self.lower), np.concatenate(self.upper)
        return h.addRows(self.count, lower, upper, len(cols), starts, cols, vals)  # type: ignore[attr-defined]
