r"""A* over the residency relaxation's graph (:mod:`.graph`): its shortest path, or a proven bound.

A* with an admissible h (:func:`.graph.node_estimate`) and re-opening (a node whose cost improves is
queued again) returns the shortest path when it takes the goal from the queue; before that, every
value it takes from the queue is at most the shortest path's cost (the queue always holds a node of
a shortest path with its least cost), so the largest such value is a proven bound when the search
stops early (time or memory).

**Dominated nodes** are dropped too: a node :math:`(G, R)` is not queued, and not expanded when
taken from the queue, when :math:`(G, R \cup \{i\})` for an evicted i (:math:`1 \le G_i < O_i`) is
known at a cost at most its own (:func:`dominated`). Proof that the bound above still holds: the
graphs with and without the edges the graph drops (residents dominate, :mod:`.graph`) have the same
least cost :math:`h^*` to the goal from every node, and :math:`h^*(G, R \cup \{i\}) \le h^*(G, R)`
(the twins). Call a known node x *on track* when :math:`g(x) + h^*(x) = C^*`, the shortest path's
cost, with g(x) its known cost (the start is). Until the goal is taken, some on-track node waits in
the queue at its known cost: from the start, step from an on-track node expanded at its known cost
to the next node of a shortest completion, or to the known node that dominates that one, and from
an on-track node dropped when taken to the node that dominates it; each is known at a cost no
greater, so on track; each step lowers :math:`h^*` (edges cost :math:`k_b > 0`) or keeps it and adds
a resident, so the walk ends, at a node neither expanded nor dropped at its known cost: one in the
queue. So every value taken from the queue is at most :math:`C^*` (whatever else is dropped).

**Known paths prune**: a run with a path of cost U known queues no child with :math:`g + h \ge U`.
When the shortest path costs less than U, every node on it has :math:`g + h \le` its cost
:math:`< U` when reached at its least cost, so the invariant above holds; so an empty queue proves
that no path costs less than U (the known path is the shortest), and the largest value taken from
the queue, capped at U, is a proven bound.

The queue, known costs and parents are numba typed containers, made and read only by the compiled
functions here (:func:`run_start`, :func:`trace`, :func:`dict_keys`).
"""

from __future__ import annotations

import heapq
import time

import numpy as np
from numba import njit, types
from numba.typed import Dict, List

from ...budget import TimeBudget
from .graph import Graph, Node, as_array, children, new_lists, node_estimate
from .relax import UNBOUNDED
from .tables import EdgeCosts

__all__ = ["EMPTY", "FULL", "GOAL", "RUNNING", "Run", "astar"]

#: Seconds a call of the compiled loop should last at least (its expansion budget doubles until
#: it does); the time limit is checked between calls.
CALL_SECONDS = 0.02

#: The type of a queue entry (g + h, -g, key) and of a recorded edge (node, child, cost).
TRIPLE = types.UniTuple(types.int64, 3)

#: Status codes of :func:`astar`.
RUNNING, GOAL, EMPTY, FULL = 0, 1, 2, 3


@njit(cache=True)
def dominated(key: int, g: int, cost: Dict, bits: int, O: np.ndarray) -> bool:
    r"""Whether the node ``key`` reached at cost ``g`` is dominated by a known node with one more
    resident (an evicted request, :math:`1 \le G_i < O_i`, resident instead) known at cost at most
    ``g`` (``cost``: the known nodes' costs; module docstring)."""
    N = O.shape[0]
    mask = (1 << bits) - 1
    shift = bits * N
    res = key >> shift
    for i in range(N):
        g_i = (key >> (bits * i)) & mask
        if (res >> i) & 1 or g_i == 0 or g_i == O[i]:
            continue
        known = cost.get(key | (1 << (shift + i)), -1)
        if 0 <= known <= g:
            return True
    return False


@njit(cache=True)
def astar(
    heap: List,
    cost: Dict,
    parent: Dict,
    goal: int,
    bits: int,
    I: np.ndarray,
    O: np.ndarray,
    limits: np.ndarray,
    costs: EdgeCosts,
    rho: np.ndarray,
    pat: np.ndarray,
    table: np.ndarray,
    keys: List,
    steps: List,
    edges: List,
    record: bool,
    upper: int,
    budget: int,
    max_nodes: int,
    best: int,
) -> tuple[int, int, int]:
    """A* with re-opening from the queue ``heap`` of (g + h, -g, key), at most ``budget``
    expansions; a child with g + h >= ``upper`` (the cost of a known path) is not queued, and
    when ``limits[5]`` is set a dominated node (:func:`dominated`) is neither queued nor expanded.
    With ``record``, every edge to a child below ``upper`` is appended to ``edges`` as (node,
    child, cost), at each expansion of the node.

    Returns (status, the largest g + h taken from the queue, the goal's cost when reached):
    status ``GOAL``, ``EMPTY`` (no path below ``upper``), ``FULL`` (more than ``max_nodes``
    nodes known) or ``RUNNING`` (budget spent; call again)."""
    done = 0
    while len(heap) > 0:
        if done >= budget:
            return RUNNING, best, 0
        f, neg_g, key = heapq.heappop(heap)
        g = -neg_g
        best = max(best, f)
        if key == goal:
            return GOAL, best, g
        if g > cost[key] or (limits[5] and dominated(key, g, cost, bits, O)):
            continue  # a stale entry (the node was queued again at a lower cost) or a dominated node
        children(key, bits, I, O, limits, costs, rho, keys, steps)
        for k in range(len(keys)):
            child, g2 = keys[k], g + steps[k]
            h = node_estimate(child, bits, I, O, limits, costs, rho, pat, table, upper - g2)
            if g2 + h >= upper:  # most children: pruned before their (slower) look-up among the known
                continue
            if record:
                edges.append((key, child, steps[k]))
            known = cost.get(child, -1)
            if (known >= 0 and g2 >= known) or (limits[5] and dominated(child, g2, cost, bits, O)):
                continue
            cost[child] = g2
            parent[child] = key
            heapq.heappush(heap, (g2 + h, -g2, child))
        done += 1
        if len(cost) > max_nodes:
            return FULL, best, 0
    return EMPTY, best, 0


class Run:
    """One A* run over a graph (queue, costs, parents), advanced by :meth:`until`; with ``record``
    it keeps the edges to the children below ``upper`` in :attr:`edges` (:func:`astar`)."""

    def __init__(self, graph: Graph, upper: int, record: bool = False) -> None:
        self.graph, self.upper, self.record = graph, upper, record
        root = node_estimate(np.int64(0), *graph.args, *graph.patterns, UNBOUNDED)
        self.heap, self.cost, self.parent, self.edges = run_start(np.int64(root))
        self.keys, self.steps = new_lists()
        #: The largest g + h taken from the queue (a proven bound, module docstring).
        self.best = 0
        #: The goal's cost when reached.
        self.value = -1

    def until(self, budget: TimeBudget, max_nodes: int) -> int:
        """Advance until the goal, an empty queue, ``max_nodes`` known nodes or the end of ``budget``
        (checked between calls of the compiled loop, each about :data:`CALL_SECONDS` long): the
        kernel's status (``RUNNING`` when the budget expired)."""
        work = 16  # the compiled loop's iterations per call
        while True:
            tic = time.perf_counter()
            status, self.best, value = astar(
                self.heap,
                self.cost,
                self.parent,
                np.int64(self.graph.goal),
                *self.graph.args,
                *self.graph.patterns,
                self.keys,
                self.steps,
                self.edges,
                self.record,
                np.int64(self.upper),
                work,
                max_nodes,
                self.best,
            )
            if status == GOAL:
                self.value = value
            if status != RUNNING or budget.expired():
                return status
            if time.perf_counter() - tic < CALL_SECONDS:
                work *= 2

    def path(self) -> list[Node]:
        """The nodes from the start to the goal (after ``GOAL``)."""
        return [self.graph.node(k) for k in trace(self.parent, np.int64(self.graph.goal)).tolist()[::-1]]

    def known(self) -> np.ndarray:
        """The keys of the nodes known (reached at some cost)."""
        return dict_keys(self.cost)


@njit(cache=True)
def run_start(root: int) -> tuple[List, Dict, Dict, List]:
    """A* at its start: the queue with the start node (priority ``root``, its estimate), the known
    costs and parents with the start's, and an empty list of recorded edges."""
    heap = List.empty_list(TRIPLE)
    heap.append((root, np.int64(0), np.int64(0)))
    cost, parent = Dict.empty(types.int64, types.int64), Dict.empty(types.int64, types.int64)
    cost[0], parent[0] = 0, -1
    return heap, cost, parent, List.empty_list(TRIPLE)


@njit(cache=True)
def trace(parent: Dict, last: int) -> np.ndarray:
    """The keys from ``last`` back to the node without a parent (-1), by ``parent``."""
    keys = List.empty_list(types.int64)
    keys.append(last)
    while parent[keys[-1]] >= 0:
        keys.append(parent[keys[-1]])
    return as_array(keys)


@njit(cache=True)
def dict_keys(table: Dict) -> np.ndarray:
    """The keys of a typed int64 dict as an array."""
    out = np.empty(len(table), np.int64)
    n = 0
    for key in table.keys():
        out[n] = key
        n += 1
    return out
