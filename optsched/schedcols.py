"""A schedule as columns: one row per item and per eviction, in arrays.

:class:`ScheduleColumns` holds the same content as a tuple of :class:`~optsched.schedule.Batch` es
(docs/schedule.md) without one Python object per item: batch ``j``'s items are rows
``item_ptr[j]:item_ptr[j + 1]`` of ``item_ref`` (the request, an index into ``ids``) and
``item_tokens``; its evictions, in order, rows ``evict_ptr[j]:evict_ptr[j + 1]`` of ``evict_ref``;
its ``start`` is ``start[j]`` (NaN for none). The compiled replay (:mod:`optsched.replaykernel`)
and the Parquet schedule file (:mod:`optsched.schedfile`) read this form.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter
from typing import Any

import numpy as np

__all__ = ["ScheduleColumns", "columns_of_batches", "columns_of_lists"]

_ID = attrgetter("id")
_TOKENS = attrgetter("tokens")
_ITEMS = attrgetter("items")
_EVICT = attrgetter("evict")


@dataclass(frozen=True)
class ScheduleColumns:
    """A schedule's batches as arrays (see the module docstring).

    Attributes
    ----------
    ids
        The request ids the schedule names, each once (first use first).
    item_ptr, evict_ptr
        Per batch, the first row of its items (resp. evictions); one more entry closes the last.
    item_ref, item_tokens
        Per item, its request (index into ``ids``) and its tokens.
    evict_ref
        Per eviction, its request (index into ``ids``).
    start
        Per batch, its ``start`` in seconds, NaN when it has none.
    """

    ids: tuple[str, ...]
    item_ptr: np.ndarray
    item_ref: np.ndarray
    item_tokens: np.ndarray
    evict_ptr: np.ndarray
    evict_ref: np.ndarray
    start: np.ndarray

    @property
    def n_batches(self) -> int:
        """Number of batches."""
        return len(self.start)

    @property
    def nonempty_batches(self) -> int:
        """Number of batches with at least one item."""
        return int(np.count_nonzero(np.diff(self.item_ptr)))

    def refs_in(self, index: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
        """Per item and per eviction, the request's position in ``index`` (an instance's ids), -1
        for an id it lacks."""
        to_index = np.fromiter((index.get(rid, -1) for rid in self.ids), np.int64, len(self.ids))
        if not len(to_index):
            return np.zeros(len(self.item_ref), np.int64), np.zeros(len(self.evict_ref), np.int64)
        return to_index[self.item_ref], to_index[self.evict_ref]

    def to_batches(self, item: Callable[[str, int], Any], batch: Callable[..., Any]) -> tuple[Any, ...]:
        """The batches as objects: ``item(id, tokens)`` per item, ``batch(items, evict, start)`` per
        batch (:class:`~optsched.schedule.Item` and :class:`~optsched.schedule.Batch`)."""
        ids = self.ids
        items = list(map(item, map(ids.__getitem__, self.item_ref.tolist()), self.item_tokens.tolist()))
        evicts = list(map(ids.__getitem__, self.evict_ref.tolist()))
        ip, ep = self.item_ptr.tolist(), self.evict_ptr.tolist()
        starts = [None if math.isnan(s) else s for s in self.start.tolist()]
        return tuple(
            batch(tuple(items[ip[j] : ip[j + 1]]), tuple(evicts[ep[j] : ep[j + 1]]), starts[j])
            for j in range(len(starts))
        )


def _pointers(lengths: list[int], n_batches: int) -> np.ndarray:
    ptr = np.zeros(n_batches + 1, np.int64)
    np.cumsum(np.array(lengths, np.int64).reshape(n_batches), out=ptr[1:])
    return ptr


def columns_of_lists(
    item_ids: Iterable[str],
    tokens: Iterable[int],
    items_per_batch: list[int],
    evict_ids: Iterable[str],
    evicts_per_batch: list[int],
    start: np.ndarray,
) -> ScheduleColumns:
    """The columns of flat per-item and per-eviction sequences (as many as the batches' counts
    add up to), with each batch's counts and its ``start`` (NaN for none).

    Each id is first mapped to the row of its first use (one ``dict.setdefault`` per row), then
    the first uses are numbered in order.

    Raises
    ------
    OverflowError
        When a token count does not fit a 64-bit integer.
    """
    n_items, n_rows = sum(items_per_batch), sum(items_per_batch) + sum(evicts_per_batch)
    first_use: dict[str, int] = {}
    rows = np.fromiter(map(first_use.setdefault, chain(item_ids, evict_ids), range(n_rows)), np.int64, n_rows)
    number = np.zeros(n_rows, np.int64)
    number[np.fromiter(first_use.values(), np.int64, len(first_use))] = np.arange(len(first_use))
    refs = number[rows]
    n_b = len(start)
    return ScheduleColumns(
        ids=tuple(first_use),
        item_ptr=_pointers(items_per_batch, n_b),
        item_ref=refs[:n_items],
        item_tokens=np.fromiter(tokens, np.int64, n_items),
        evict_ptr=_pointers(evicts_per_batch, n_b),
        evict_ref=refs[n_items:],
        start=start,
    )


def columns_of_batches(batches: Sequence[Any]) -> ScheduleColumns:
    """The columns of a sequence of batches (objects with ``items``, ``evict`` and ``start``);
    :class:`OverflowError` for a token count beyond 64 bits."""
    item_lists = list(map(_ITEMS, batches))
    evict_lists = list(map(_EVICT, batches))
    items = list(chain.from_iterable(item_lists))
    return columns_of_lists(
        list(map(_ID, items)),
        list(map(_TOKENS, items)),
        list(map(len, item_lists)),
        list(chain.from_iterable(evict_lists)),
        list(map(len, evict_lists)),
        np.fromiter((np.nan if b.start is None else b.start for b in batches), np.float64, len(batches)),
    )
