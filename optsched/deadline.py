"""Deadlines of the solvers' set-up and search loops: absolute ``time.perf_counter()`` values, or
None for no deadline."""

from __future__ import annotations

import time

__all__ = ["passed"]


def passed(deadline: float | None) -> bool:
    """Whether ``deadline`` has passed (never when it is None)."""
    return deadline is not None and time.perf_counter() > deadline
