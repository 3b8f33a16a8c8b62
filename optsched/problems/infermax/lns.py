"""Anytime search over segment lists (:mod:`.segments`): starting segment lists, then simulated annealing.

The search looks for the segment list of least objective; every segment list is a schedule (a
segment list's cost is its schedule's objective under the contract, :mod:`.segments`), and the
caller replays the best one before reporting it. It runs until its
:class:`~optsched.budget.TimeBudget` no longer holds one more evaluation.

1. **Starting segment lists.** One segment per request (no eviction), the requests sorted by each of
   several keys (output length, prompt length, their sum, both directions, instance order), chunk
   sizes from P down to 64 tokens, start grids of 1 to 16 batches: the best few segment lists found.
2. **Annealing** from the best starting segment list with moves (:data:`MOVES`) on the placement order
   (swap two segments, move one), on a request's chunk size (halve, double, back to P), on the start
   grid, and, when evictions are allowed, on its segments (split a segment at a token: the request
   is evicted there and refilled later; merge two consecutive segments; move a split point). Each
   move is drawn with a probability that follows its share of tries that improved the current
   segment list (plus :data:`ADAPT_FLOOR`), so the moves that pay on an instance are tried most. A
   move that puts a request's segments out of token order is repaired by reordering that request's
   segments over the positions they hold. Moves are accepted by the Metropolis rule at a temperature
   that falls linearly to zero when the budget expires, starting at ``START_TEMPERATURE`` of the
   starting segment list's cost; the search returns to the best segment list every
   ``RESTART_EVERY`` non-improving moves.

This is the large-neighbourhood search of the issue in the encoding of project scheduling (a list
of activities decoded by serial schedule generation), where one evaluation takes about a
millisecond at a hundred requests: windows re-optimised by CP-SAT would cost seconds each.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np

from ...budget import SlowestRun, TimeBudget
from .segments import SegmentArrays, SegmentList, segments_cost

__all__ = ["SearchStep", "improve_segment_lists", "starting_segment_lists"]

#: Chunk sizes tried for the starting segment lists (clipped to P; P itself is always tried).
START_CHUNKS = (1024, 512, 256, 128, 64)
#: Start grids tried for the starting segment lists.
START_GRIDS = (1, 2, 4, 8, 16)
#: Initial annealing temperature, as a share of the starting segment list's cost.
START_TEMPERATURE = 0.002
#: Non-improving moves after which the search goes back to the best segment list.
RESTART_EVERY = 2000
#: Least weight of a move in the adaptive choice (added to its share of improving tries).
ADAPT_FLOOR = 0.02


@dataclass(frozen=True)
class SearchStep:
    """An improving segment list found by the search: the segment list, its cost and when (seconds since the start)."""

    segments: SegmentList
    cost: float
    elapsed: float
    evaluations: int


def _sort_keys(data: SegmentArrays) -> dict[str, np.ndarray]:
    I, O = data.prompt, data.output
    return {
        "output-desc": np.argsort(-O, kind="stable"),
        "output-asc": np.argsort(O, kind="stable"),
        "prompt-asc": np.argsort(I, kind="stable"),
        "prompt-desc": np.argsort(-I, kind="stable"),
        "size-desc": np.argsort(-(I + O), kind="stable"),
        "instance": np.arange(len(I)),
    }


def starting_segment_lists(
    data: SegmentArrays,
    objective: str,
    budget: TimeBudget,
    kept: float = 0.0,
    slowest: SlowestRun | None = None,
) -> list[tuple[float, SegmentList]]:
    """Whole-request segment lists over every sort key, chunk size and grid (module docstring, step 1),
    by increasing cost, each while one more evaluation and ``kept`` more, each as slow as the slowest
    so far, fit in ``budget`` (``kept``: the caller's work after the search, in evaluations: the best
    segment list's schedule; ``slowest``: the evaluations' timer, shared with the caller's other
    searches); at least one segment list even once ``budget`` has expired."""
    chunks = sorted({min(data.P, data.C)} | {c for c in START_CHUNKS if c < min(data.P, data.C)}, reverse=True)
    out: list[tuple[float, SegmentList]] = []
    slowest = SlowestRun() if slowest is None else slowest
    for order in _sort_keys(data).values():
        for chunk in chunks:
            q = np.minimum(data.prompt, chunk)
            for grid in START_GRIDS:
                if out and not slowest.fits(budget, 1.0 + kept):
                    return sorted(out, key=lambda x: x[0])
                with slowest.timing():
                    segments = SegmentList.whole(order, data.output, q, grid)
                    out.append((segments_cost(data, segments, objective), segments))
    return sorted(out, key=lambda x: x[0])


def _repair(segments: SegmentList, positions: np.ndarray) -> SegmentList:
    """Reorder the segments of each request over the positions they hold so their tokens are in
    order (``positions``: the new order as indices into the old segments)."""
    req, g0 = segments.request[positions], segments.g0[positions]
    g1, chunk = segments.g1[positions], segments.chunk[positions]
    for i in np.unique(req):
        at = np.nonzero(req == i)[0]
        if len(at) > 1:
            by = at[np.argsort(g0[at], kind="stable")]
            g0[at], g1[at], chunk[at] = g0[by], g1[by], chunk[by]
    return SegmentList(req, g0, g1, chunk, segments.grid)


#: The moves: on the order, the chunk sizes, the grid, and (with evictions) the segments.
MOVES = ("swap", "move", "chunk", "grid", "split", "merge", "shift")
#: Start grids a ``grid`` move picks from.
GRIDS = (1, 2, 3, 4, 6, 8, 12, 16)


def _move(segments: SegmentList, data: SegmentArrays, rng: np.random.Generator, kind: int) -> SegmentList | None:
    """A random neighbour of ``segments`` by the move ``MOVES[kind]`` (module docstring), or None when
    the move does not apply."""
    n = len(segments.request)
    if kind == 3:  # another start grid
        grid = int(rng.choice([g for g in GRIDS if g != segments.grid]))
        return replace(segments, grid=grid)
    if kind == 0:  # swap two segments
        a, b = rng.integers(n, size=2)
        pos = np.arange(n)
        pos[a], pos[b] = b, a
        return _repair(segments, pos)
    if kind == 1:  # move a segment elsewhere
        a, b = rng.integers(n, size=2)
        pos = np.insert(np.delete(np.arange(n), a), b, a)
        return _repair(segments, pos)
    if kind == 2:  # change a request's chunk size
        i = segments.request[rng.integers(n)]
        at = segments.request == i
        cap = min(data.P, data.C)
        q = int(segments.chunk[at][0])
        choice = rng.integers(3)
        q = cap if choice == 0 else max(1, q // 2) if choice == 1 else min(cap, 2 * q)
        chunk = segments.chunk.copy()
        chunk[at] = np.minimum(q, data.prompt[i] + segments.g0[at])
        return replace(segments, chunk=chunk)
    if kind == 4:  # split a segment: evict at a token, refill later
        s = rng.integers(n)
        g0, g1 = int(segments.g0[s]), int(segments.g1[s])
        if g1 - g0 < 2:
            return None
        g = int(rng.integers(g0 + 1, g1))
        at = int(rng.integers(s + 1, n + 1))
        cap = min(data.P, data.C)
        q = min(cap, int(segments.chunk[s]), int(data.prompt[segments.request[s]]) + g)
        split = SegmentList(
            np.insert(segments.request, at, segments.request[s]),
            np.insert(segments.g0, at, g),
            np.insert(np.where(np.arange(n) == s, g, segments.g1), at, g1),
            np.insert(segments.chunk, at, q),
            segments.grid,
        )
        return _repair(split, np.arange(n + 1))
    multi = [i for i in np.unique(segments.request) if np.count_nonzero(segments.request == i) > 1]
    if not multi:
        return None
    i = multi[rng.integers(len(multi))]
    at = np.nonzero(segments.request == i)[0]
    k = int(rng.integers(len(at) - 1))
    a, b = at[k], at[k + 1]  # consecutive segments of request i, in token order
    if kind == 5:  # merge them
        g1 = segments.g1.copy()
        g1[a] = segments.g1[b]
        keep = np.arange(n) != b
        return SegmentList(segments.request[keep], segments.g0[keep], g1[keep], segments.chunk[keep], segments.grid)
    lo, hi = int(segments.g0[a]) + 1, int(segments.g1[b]) - 1  # move the split point within (g0_a, g1_b)
    if hi < lo:
        return None
    g = int(rng.integers(lo, hi + 1))
    g0, g1 = segments.g0.copy(), segments.g1.copy()
    g1[a], g0[b] = g, g
    chunk = segments.chunk.copy()
    chunk[b] = min(int(chunk[b]), int(data.prompt[i]) + g)
    return SegmentList(segments.request, g0, g1, chunk, segments.grid)


def improve_segment_lists(
    data: SegmentArrays,
    objective: str,
    budget: TimeBudget,
    evictions: bool = True,
    seed: int = 0,
    start: list[tuple[float, SegmentList]] | None = None,
    kept: float = 0.0,
    slowest: SlowestRun | None = None,
) -> Iterator[SearchStep]:
    """Yield every improving segment list until ``budget`` (a budget with a limit) no longer holds one
    more evaluation and ``kept`` more, each as slow as the slowest so far (``kept``, ``slowest``: as in
    :func:`starting_segment_lists`): first the best starting segment list, then each better segment
    list the annealing finds (module docstring)."""
    clock = time.perf_counter
    t0 = clock()
    slowest = SlowestRun() if slowest is None else slowest
    segment_lists = start if start is not None else starting_segment_lists(data, objective, budget, kept, slowest)
    best_cost, best = segment_lists[0]
    evaluations = len(segment_lists)
    yield SearchStep(best, best_cost, clock() - t0, evaluations)
    rng = np.random.default_rng(seed)
    cur, cur_cost = best, best_cost
    span = budget.left(1e-9)
    temp0 = START_TEMPERATURE * best_cost
    stale = 0
    kinds = len(MOVES) if evictions else 4
    tried, gained = np.ones(kinds), np.ones(kinds)  # adaptive choice: moves that improve are tried more
    while slowest.fits(budget, 1.0 + kept):  # Ctrl-C expires every budget (optsched.interrupt)
        weight = gained / tried + ADAPT_FLOOR
        kind = int(rng.choice(kinds, p=weight / weight.sum()))
        with slowest.timing():
            cand = _move(cur, data, rng, kind)
            cost = math.inf if cand is None else segments_cost(data, cand, objective)
        if cand is None:
            continue
        evaluations += 1
        tried[kind] += 1
        if cost < cur_cost:
            gained[kind] += 1
        left = budget.left()
        temp = temp0 * (1.0 if left is None or span is None else left / span)

        if cost <= cur_cost or (temp > 0 and rng.random() < math.exp(-(cost - cur_cost) / temp)):
            cur, cur_cost = cand, cost
        if cost < best_cost - 1e-15 * abs(best_cost):
            best, best_cost, stale = cand, cost, 0
            yield SearchStep(best, best_cost, clock() - t0, evaluations)
        else:
            stale += 1
            if stale >= RESTART_EVERY:
                cur, cur_cost, stale = best, best_cost, 0


def segments_from_trajectories(
    data: SegmentArrays, classes: list[tuple[int, int]], solution: list[tuple[int, np.ndarray, float]]
) -> SegmentList:
    """A segment list that follows a solution of the trajectory relaxation (:mod:`.colgen`): each class's
    requests take its trajectories in proportion to their weights (largest remainders), each
    trajectory's fills start segments, and the segments are placed in the order of their first
    batch in the relaxation. ``classes``: (prompt, output) of each class index."""
    members: dict[tuple[int, int], list[int]] = {}
    for i, (I, O) in enumerate(zip(data.prompt.tolist(), data.output.tolist())):
        members.setdefault((I, O), []).append(i)
    segments: list[tuple[int, int, int, int]] = []  # (first batch, request, g0, g1)
    for ci, (I, O) in enumerate(classes):
        reqs = members.get((I, O), [])
        cols = sorted(((act, w) for c, act, w in solution if c == ci), key=lambda x: -x[1])
        if not reqs or not cols:
            continue
        weights = np.array([w for _, w in cols]) * len(reqs) / sum(w for _, w in cols)
        counts = np.floor(weights).astype(int)
        for k in np.argsort(-(weights - counts), kind="stable")[: len(reqs) - counts.sum()]:
            counts[k] += 1
        assigned = [act for (act, _), n in zip(cols, counts) for _ in range(n)]
        for i, act in zip(reqs, assigned):
            gen = np.cumsum((act == 1) | (act == 2))
            starts = np.nonzero(act == 1)[0]
            g0s = [int(gen[t]) - 1 for t in starts]
            for t, g0, g1 in zip(starts, g0s, g0s[1:] + [O]):
                segments.append((int(t), i, g0, g1))
    segments.sort()
    arr = np.array([(i, g0, g1) for _, i, g0, g1 in segments], dtype=np.int64).reshape(-1, 3)
    cap = min(data.P, data.C)
    chunk = np.minimum(cap, data.prompt[arr[:, 0]] + arr[:, 1])
    return SegmentList(arr[:, 0], arr[:, 1], arr[:, 2], chunk, 1)
