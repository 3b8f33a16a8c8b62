"""Per-token sums over requests, in blocks of bounded memory.

A bound that sums a term over every (request i, rank k) pair, k = 0..counts_i - 1, walks the pairs
in blocks (:func:`token_blocks`) and adds each block's per-request sums (:func:`add_by_owner`): the
memory is that of one block however many tokens the requests have, and the time is linear in the
pairs and the requests (no search per pair, no pass over every request per block).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

__all__ = ["add_by_owner", "token_blocks"]


def token_blocks(counts: np.ndarray, block: int) -> Iterator[tuple[slice, np.ndarray, np.ndarray, np.ndarray]]:
    """Every pair (request i, rank k), k = 0..counts_i - 1, in request then rank order, in blocks of
    at most ``block`` pairs, a long request split over several blocks.

    Per block: the slice of the requests it touches, and per pair its owner (request index), its
    rank and the position in the block of its owner's first pair there. Linear in the pairs and the
    requests (no search per pair).
    """
    ends = np.cumsum(counts)
    starts = ends - counts
    total = int(ends[-1]) if len(ends) else 0
    for lo in range(0, total, block):
        hi = min(lo + block, total)
        first_owner = int(np.searchsorted(ends, lo, side="right"))
        last_owner = int(np.searchsorted(ends, hi - 1, side="right"))
        owners = slice(first_owner, last_owner + 1)
        here = np.minimum(ends[owners], hi) - np.maximum(starts[owners], lo)
        owner = np.repeat(np.arange(first_owner, last_owner + 1), here)
        begin = starts[owner]
        yield owners, owner, np.arange(lo, hi) - begin, np.maximum(begin, lo) - lo


def add_by_owner(total: np.ndarray, owners: slice, owner: np.ndarray, weights: np.ndarray) -> None:
    """``total[i] += sum of weights of owner i``, over the requests of one block only."""
    total[owners] += np.bincount(owner - owners.start, weights=weights, minlength=owners.stop - owners.start)
