"""Python's cyclic garbage collector paused around a search that allocates millions of objects."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["cyclic_collector_paused"]


@contextmanager
def cyclic_collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector within the block (and resume it after, if it ran).

    A search's labels and states are millions of acyclic tuples, freed by their reference counts;
    each full collection would walk them all, for seconds, at moments no clock check sees. The
    block must free them before it ends (keep no reference cycle to them), or the first collection
    after it walks them once more.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
