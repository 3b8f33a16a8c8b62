"""Per-token sums over requests, in blocks of bounded memory.

A bound that sums a term over every (request i, rank k) pair, k = 0..counts_i - 1, walks the pairs
in blocks (:func:`token_blocks`) and adds each block's per-request sums (:func:`add_by_owner`): the
memory is that of one block however many tokens the requests have, and the time is linear in the
pairs and the requests (no search per pair, no pass over every request per block).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import numpy as np

__all__ = ["add_by_owner", "smallest_clipped_sums", "sum_of_runs", "token_blocks"]


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


def sum_of_runs(
    starts: np.ndarray, counts: np.ndarray, term: Callable[[np.ndarray], np.ndarray], block: int
) -> np.ndarray:
    """Per request i, the sum of ``term(h)`` over the run h = starts_i .. starts_i + counts_i - 1.

    ``term`` maps an array of positions (float64) to their terms. When the runs end at most at
    max(``block``, the number of pairs), the sum is F(end_i) - F(start_i) of the running sum F of the
    term over every position 0 .. the last end (time linear in the requests and that position);
    beyond it, the pairs are summed in blocks of ``block`` (:func:`token_blocks`).
    """
    ends = starts + counts
    top = int(ends.max(initial=0))
    if top <= max(block, int(counts.sum())):
        running = np.concatenate(([0.0], np.cumsum(term(np.arange(top, dtype=np.float64)))))
        return running[ends] - running[starts]
    total = np.zeros(len(starts))
    for owners, owner, rank, _ in token_blocks(counts, block):
        add_by_owner(total, owners, owner, term(starts[owner].astype(np.float64) + rank))
    return total


def smallest_clipped_sums(
    base: np.ndarray, counts: np.ndarray, slope: float, offset: float, width: int, cuts: np.ndarray
) -> np.ndarray:
    """``[s, D]``: over the requests i < ``cuts[s]``, the sum of the r_i = (counts_i - D)^+ smallest
    of request i's terms (slope h + offset)^+ at its positions h = base_i + 1 .. base_i + counts_i,
    for D = 0 .. ``width`` - 1, in time linear in the requests and ``width`` (no pass over the
    positions).

    The terms are a clipped linear function of h, so the r smallest are the r first positions
    (``slope`` >= 0) or the r last; of those, the ones with a positive term form one run [lo, hi]
    whose ends are affine in D, and the run's sum, slope (T(hi) - T(lo - 1)) + offset (hi - lo + 1)
    with T(x) = x (x + 1) / 2, is a quadratic in D whose integer coefficients are summed per
    request exactly (int64, or Python integers where int64 could overflow) by the last D at which
    the request's run is non-empty.
    """
    base, counts = base.astype(np.int64), np.maximum(counts.astype(np.int64), 0)
    last = int((base + counts).max(initial=0))  # every D with a non-empty run is below it
    exact = np.int64 if len(base) * (last + 2) ** 2 < 2**62 else object
    base = base.astype(exact)
    end = base + counts
    if slope > 0:
        lowest = math.floor(-offset / slope) + 1  # the first position with a positive term
        lowest += slope * lowest + offset <= 0
    elif slope == 0:
        lowest = 0 if offset > 0 else last + 1
    else:
        highest = math.ceil(-offset / slope) - 1  # the last position with a positive term
        highest -= slope * highest + offset <= 0
    if slope >= 0:  # run [max(base + 1, lowest), end - D]: sum T(end - D) = (u - D v + D^2) / 2 summed
        lo = np.maximum(base + 1, min(max(lowest, 0), last + 1))
        sign = -1
        u, v, fixed, lin = end * (end + 1), 2 * end + 1, lo * (lo - 1) // 2, end - lo + 1
        stop = end - lo
    else:  # run [base + D + 1, min(end, highest)]: sum T(base + D) = (u + D v + D^2) / 2 summed
        hi, sign = np.minimum(end, max(highest, 0)), 1
        u, v, fixed, lin = base * (base + 1), 2 * base + 1, hi * (hi + 1) // 2, hi - base
        stop = hi - base - 1
    keep = np.asarray(stop >= 0, dtype=bool)
    full, width = width, min(width, int(stop.max(initial=-1)) + 1)  # no run reaches D >= width
    segment = np.searchsorted(cuts, np.flatnonzero(keep), side="right")
    key = segment * width + np.minimum(stop[keep], width - 1).astype(np.int64)
    sums = np.zeros((5, len(cuts) * width), dtype=exact)
    for row, column in enumerate((np.ones_like(u), u, v, fixed, lin)):
        np.add.at(sums[row], key, column[keep].astype(exact))
    # per D the requests whose run is non-empty at D (stop >= D), then per prefix of segments
    sums = np.cumsum(np.cumsum(sums.reshape(5, len(cuts), width)[:, :, ::-1], axis=2)[:, :, ::-1], axis=1)
    n, u, v, fixed, lin = sums
    D = np.arange(width, dtype=np.int64).astype(exact)
    quad = (u + sign * D * v + D * D * n) // 2  # sum T(end - D) (slope >= 0) or sum T(base + D)
    runs = quad - fixed if slope >= 0 else fixed - quad
    found = np.zeros((len(cuts), full))
    found[:, :width] = slope * runs.astype(np.float64) + offset * (lin - D * n).astype(np.float64)
    return found
