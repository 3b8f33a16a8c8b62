r"""Pattern tables: the least cost to the goal from every node of a pattern's graph.

A pattern P (some of the requests) has its own graph (:mod:`.graph`: the requests of P alone,
the same M, C, R_max and costs, every edge). Its table holds, for every node :math:`(G_P, R)`,
the least cost :math:`h^*_P` to the goal, which the estimate reads at the projection of a node
(:func:`patterns_at`; the proof of admissibility is in :mod:`.graph`). Entries are at index
:math:`2^k \sum_i G_i s_i + R` (k requests, mixed radix :math:`s_i = \prod_{j < i} (O_j + 1)`, R the
residents' bit set).

Every edge generates a token, so the G states are filled by decreasing tokens generated (a
*level*): their children are done. The G states of a level are filled in parallel, each one for
every bit set of residents at once (:func:`pattern_entries`): an edge from (G, R) generates a set S
and idles a set D of residents outside S; its cost depends on R only through the fills
:math:`S \setminus R` and the decodes :math:`S \cap R`, and its child on S and D. So for each S the
least entry over the sets D within each set X of possible idlers (a subset minimum, X by increasing
bit set) gives every R at once: :math:`\text{entry}(G, R) = \min_S \text{cost}(S, R) +` that minimum
at :math:`R \setminus S`. A table is built level by level from Python, the budget checked between
levels; the search and the chunk bound of one solve read the same tables, kept by their arguments
(:func:`tabulated`).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit, prange

from ...budget import NO_LIMIT, TimeBudget
from .relax import UNBOUNDED

__all__ = [
    "ENTRY_SECONDS",
    "EdgeCosts",
    "LARGEST_TABLE",
    "pattern_table",
    "patterns_at",
    "table_entries",
    "table_seconds",
    "tabulated",
]


class EdgeCosts(NamedTuple):
    """The cost-model terms of a graph's edge costs in integer units (:func:`.relax.floor_units` of the
    folded coefficients of the linear twin, each named as its coefficient), and ``least_bias``, the
    least of the two phase biases; the kernels read it as a named tuple."""

    base: int
    prefill_bias: int
    decode_bias: int
    least_bias: int


#: Most entries in the heaviest pattern's table (G states times residents' bit sets, 8 bytes each:
#: 2.1 GB), and the seconds an entry takes to tabulate (measured on the 2-core sandbox with 5 and 6
#: requests: 0.05 and 0.07-0.075 µs on both cores, 0.12 µs on one).
LARGEST_TABLE = 1 << 28
ENTRY_SECONDS = 8e-8

#: The pattern tables made last (:func:`tabulated`), by their kernel arguments: the search and
#: the chunk bound of one solve tabulate the same patterns.
_TABLES: dict[tuple, np.ndarray] = {}

#: Entries kept in :data:`_TABLES` at most (8 bytes each), besides the table made last: the tables
#: of one graph.
KEPT_ENTRIES = LARGEST_TABLE


def _table_key(args: tuple) -> tuple:
    """The key of the pattern graph ``args`` (I, O, limits, costs, rho) in :data:`_TABLES`."""
    return tuple(a if isinstance(a, (int, tuple)) else (a.shape, a.tobytes()) for a in args)


def table_entries(O: np.ndarray) -> int:
    """Entries of the table of a pattern whose requests have the outputs ``O``: its G states times
    its bit sets."""
    return int(np.prod(O + 1)) << len(O)


def table_seconds(args: tuple) -> float:
    """Seconds the table of the pattern graph ``args`` (I, O, limits, costs, rho) should take: 0 when
    it is kept from before (:func:`tabulated`), else :data:`ENTRY_SECONDS` an entry."""
    return 0.0 if _table_key(args) in _TABLES else table_entries(args[1]) * ENTRY_SECONDS


def tabulated(args: tuple, budget: TimeBudget = NO_LIMIT) -> np.ndarray | None:
    """:func:`pattern_table` of the pattern graph ``args``, made once while it is among the last
    tables made (the oldest are dropped beyond :data:`KEPT_ENTRIES`); None when it is not done
    within ``budget`` (checked between its levels)."""
    key = _table_key(args)
    if key not in _TABLES:
        table = pattern_table(*args, budget=budget)
        if table is None:
            return None
        while _TABLES and sum(map(len, _TABLES.values())) + len(table) > KEPT_ENTRIES:
            del _TABLES[next(iter(_TABLES))]
        _TABLES[key] = table
    return _TABLES[key]


def pattern_table(
    I: np.ndarray,
    O: np.ndarray,
    limits: np.ndarray,
    costs: EdgeCosts,
    rho: np.ndarray,
    budget: TimeBudget = NO_LIMIT,
) -> np.ndarray | None:
    r"""The least cost to the goal from every node of the graph of the requests ``I``, ``O`` with
    the limits ``limits`` = (M, least of C and R_max, R_max) and the costs given (every edge), at
    index :math:`2^k \sum_i G_i s_i + R` (k requests, mixed radix :math:`s_i = \prod_{j < i} (O_j +
    1)`, R the residents' bit set; entries of bit sets that are not nodes, residents with G = 0 or
    O or whose KV exceeds M or R_max, stay 0; no path: :data:`UNBOUNDED`), or None when it is not
    done within ``budget``. Every edge generates a token, so the G
    states are taken by decreasing tokens generated (a level), those of a level in parallel: their
    children are done; the budget is checked between levels."""
    stride, order, levels = pattern_levels(O)
    table = np.zeros(int(order.shape[0]) << I.shape[0], np.int64)
    for start, end in zip(levels[1:-1], levels[2:]):  # the first level is the goal alone: entry 0
        if budget.expired():
            return None
        pattern_level(order[start:end], stride, I, O, limits, costs, rho, table)
    return table


@njit(cache=True)
def pattern_levels(O: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The mixed radix strides of the G states of the outputs ``O``, the states by decreasing
    tokens generated, and where each level (a number of tokens generated) starts in that order,
    then the number of states."""
    N = O.shape[0]
    stride = np.ones(N, np.int64)
    for i in range(1, N):
        stride[i] = stride[i - 1] * (O[i - 1] + 1)
    states = stride[N - 1] * (O[N - 1] + 1)
    generated = np.zeros(states, np.int64)
    for s in range(states):
        for i in range(N):
            generated[s] += (s // stride[i]) % (O[i] + 1)
    order = np.argsort(-generated, kind="mergesort")
    levels = [0]
    for k in range(1, states):
        if generated[order[k]] != generated[order[k - 1]]:
            levels.append(k)
    levels.append(states)
    return stride, order, np.array(levels, np.int64)


@njit(cache=True, parallel=True)
def pattern_level(
    level: np.ndarray,
    stride: np.ndarray,
    I: np.ndarray,
    O: np.ndarray,
    limits: np.ndarray,
    costs: EdgeCosts,
    rho: np.ndarray,
    table: np.ndarray,
) -> None:
    """The entries of :func:`pattern_table` at the G states ``level`` (as many tokens generated
    each), in parallel."""
    for k in prange(level.shape[0]):
        pattern_entries(level[k], stride, I, O, limits, costs, rho, table)


@njit(cache=True)
def pattern_entries(
    s: int,
    stride: np.ndarray,
    I: np.ndarray,
    O: np.ndarray,
    limits: np.ndarray,
    costs: EdgeCosts,
    rho: np.ndarray,
    table: np.ndarray,
) -> None:
    r"""The entries of :func:`pattern_table` at the G state ``s``, one per bit set R of residents
    that is a node, from the entries of its children, over bit sets rather than edge by edge.

    An edge from (G, R) generates a set S of unfinished requests (within C and R_max, holding
    :math:`I_i + G_i` each) and idles a set D of residents outside S (:math:`I_i + G_i - 1` each),
    within M and R_max together; it leads to (G + S, (S less those it finishes) + D). Its cost
    depends on R only through the fills :math:`S \setminus R` and the decodes :math:`S \cap R` (the
    edge cost of :func:`.graph.children`). So for each S, the least entry over the sets D within
    each set X of residents that may idle (a subset-minimum, by increasing X) gives every R at
    once: entry(G, R) = least over S of cost(S, R) + that minimum at :math:`R \setminus S`."""
    N = I.shape[0]
    full = 1 << N
    M, per_batch, R_max = limits[0], limits[1], limits[2]
    k_b, k_pb, k_db = costs.base, costs.prefill_bias, costs.decode_bias
    G = np.empty(N, np.int64)
    unfinished = partial = 0  # bit sets: G_i < O_i, and 1 <= G_i < O_i (may be resident)
    for i in range(N):
        G[i] = (s // stride[i]) % (O[i] + 1)
        if G[i] < O[i]:
            unfinished |= 1 << i
            if G[i] > 0:
                partial |= 1 << i
    # per bit set X: KV of X idling, KV of X generating, members, refill extras of X (re)filled
    idling, generating = np.zeros(full, np.int64), np.zeros(full, np.int64)
    size, extras = np.zeros(full, np.int64), np.zeros(full, np.int64)
    for X in range(1, full):
        j = 0
        while not (X >> j) & 1:
            j += 1
        rest = X & (X - 1)
        idling[X] = idling[rest] + I[j] + G[j] - 1
        generating[X] = generating[rest] + I[j] + G[j]
        size[X] = size[rest] + 1
        extras[X] = extras[rest] + (rho[j, G[j] + 1] if 0 < G[j] < O[j] else 0)
    least = np.full(full, UNBOUNDED, np.int64)  # entry(G, R) so far, by R
    within = np.empty(full, np.int64)  # least entry over the idling sets D within X, by X
    S = unfinished
    while S:  # every nonempty S within C, R_max and M
        if size[S] <= per_batch and size[S] <= R_max and generating[S] <= M:
            child, finished = s, 0
            for i in range(N):
                if (S >> i) & 1:
                    child += stride[i]
                    if G[i] + 1 == O[i]:
                        finished |= 1 << i
            base = (child << N) | (S & ~finished)
            idlers = partial & ~S
            room, slots = M - generating[S], R_max - size[S]
            X = 0
            while True:  # the subsets of idlers in increasing order: each one's subsets come first
                value = table[base | X] if idling[X] <= room and size[X] <= slots else UNBOUNDED
                rest = X
                while rest:
                    j = rest & -rest
                    value = min(value, within[X ^ j])
                    rest ^= j
                within[X] = value
                X = (X - idlers) & idlers
                if X == 0:
                    break
            R = partial
            while True:
                fills, decodes = S & ~R, S & R
                cost = k_b + within[R & idlers]
                if fills:
                    cost += k_pb + extras[fills]
                if decodes:
                    cost += min(k_db, (0 if fills else k_pb) + extras[decodes])
                least[R] = min(least[R], cost)
                if R == 0:
                    break
                R = (R - 1) & partial
        S = (S - 1) & unfinished
    R = partial
    while True:
        if idling[R] <= M and size[R] <= R_max:
            table[(s << N) | R] = least[R]
        if R == 0:
            break
        R = (R - 1) & partial


@njit(cache=True)
def patterns_at(
    key: int, bits: int, O: np.ndarray, rho: np.ndarray, pat: np.ndarray, table: np.ndarray, enough: int
) -> int:
    """The largest pattern table entry at the node ``key``'s projections plus the least refill
    extras of the evicted requests outside the pattern (module docstring; 0 without patterns), or
    the first that reaches ``enough``:
    row p of ``pat`` is (offset of its table, the G stride of each request, its residency stride),
    strides 0 for the requests outside the pattern (:meth:`.graph.Graph.add_patterns`)."""
    N = O.shape[0]
    mask = (1 << bits) - 1
    res = key >> (bits * N)
    best = 0
    for p in range(pat.shape[0]):
        value = pat[p, 0]  # the entry's index, then the entry plus the extras
        extras = 0
        for i in range(N):
            g = (key >> (bits * i)) & mask
            if pat[p, 1 + i]:
                value += g * pat[p, 1 + i] + ((res >> i) & 1) * pat[p, 1 + N + i]
            elif not (res >> i) & 1 and 0 < g < O[i]:
                extras += min(rho[i, g + 1], rho[i, O[i]])
        best = max(best, table[value] + extras)
        if best >= enough:
            break
    return best
