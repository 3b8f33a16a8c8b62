r"""The quadratic prefill term over the relaxation's near-optimal paths: a bound that closes µs gaps.

The residency relaxation (:mod:`.relax`, solved by :mod:`.search`) and the token work W count a
prefill chunk of c tokens as :math:`L (k_t + k_{pt} + k_{pq}) c` (:math:`c^2 \ge c`), so a schedule's
makespan is at least :math:`W + V(\pi) + Q`, with :math:`V(\pi)` the cost of its path :math:`\pi` in
the relaxation's graph and :math:`Q = L k_{pq} \sum (c^2 - c)` over its prefill chunks (W, the
path's edges and Q count disjoint parts of its batch times; :mod:`.relax`, proof). When the
relaxation's optimum :math:`V^*` is within µs of the best schedule known, U, the gap is Q, and
this module bounds it path by path.

Take any schedule and its path :math:`\pi` (the mapping of :mod:`.relax`'s proof: eviction-only
batches and batches without a generated token dropped). Either

1. some prefill chunk lies in a batch that is not a *fill batch* of :math:`\pi` (a batch in which a
   request that held no KV generates): a dropped batch, which costs at least
   :math:`L(k_b + k_{pb})`, or a batch whose edge has decodes only, which then pays :math:`L k_{pb}`
   more than its edge (its point has :math:`p_j = d_j = 1`, the edge at most :math:`k_b + k_{db}`).
   So its makespan is at least :math:`W + V^* + \kappa`, :math:`\kappa = L k_{pb}`; or
2. every chunk lies in a fill batch of :math:`\pi`. Each (re)fill of request i completing in fill
   batch j prefills :math:`X = I_i + G_i` tokens (its G before the batch) in chunks
   :math:`c_t \ge 0` over the fill batches t of :math:`\pi` from the first batch after i's last
   residency before j (it may be evicted at the start of that batch) up to j, with
   :math:`c_j \ge 1`; chunks of a fill that were later lost to an eviction only add cost, so only the
   last, uninterrupted run counts. A run's chunks stay in memory until j: in every batch t of
   :math:`\pi` before j its partial KV :math:`\sum_{t' \le t} c_{t'}` adds to the path's own KV
   (the residents' :math:`I + G' - 1`), within M; per batch the chunks hold P, and with the decodes
   C. So :math:`Q \ge L k_{pq} (\min \sum c^2 - \sum X) =: Q(\pi)`, the least over these chunkings
   (a small integer program, solved by CP-SAT; infeasible means no schedule has this path).

Every path of cost below :math:`T = U - W` is listed (:func:`near_paths`); a schedule whose path
costs :math:`T` or more is no better than U. So the optimum is at least
:math:`W + \min(\min_\pi (V(\pi) + Q(\pi)), V^* + \kappa, T)`. The paths are those of the graph with
every edge (:class:`.search._Graph` with ``drop_dominated=False``: an eviction the search drops
as dominated frees memory a chunk can use). Listing them: A* pruned at T, run until its queue is
empty, knows every node of every such path, at a cost no greater than the path's prefix (by
induction along the path: the estimate is admissible); the least cost to the goal of each known
node, over known nodes (:func:`_cost_to_go`, in decreasing order of tokens generated: the graph
is acyclic), then guides a depth-first walk that follows an edge only while some completion stays
below T. Costs are integer picoseconds rounded down, as in :mod:`.relax`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
from numba import njit, types
from numba.typed import Dict, List
from ortools.sat.python import cp_model

from ...bounds import request_work
from ...deadline import passed, seconds_left
from ...instance import Instance
from .model import Coefficients
from .relax import UNIT, _floor
from .search import (
    _EMPTY, _GOAL, _RUNNING, UNBOUNDED, Node, _children, _compile_instance, _Graph, _new_lists, _Run,
)

__all__ = ["ChunkBound", "chunk_bound", "near_paths"]

#: Most near-optimal paths priced; with more, no bound is given.
MAX_PATHS = 2_000

#: Most nodes the listing keeps (its A* and the costs to the goal).
MAX_NODES = 5_000_000


@dataclass(frozen=True)
class ChunkBound:
    """Outcome of :func:`chunk_bound`.

    Attributes
    ----------
    bound
        Proven lower bound (seconds) on the makespan, at most ``upper``, or None when the paths
        could not all be listed and priced (too many, or out of time).
    paths
        Paths listed (those below ``upper - W``).
    """

    bound: float | None
    paths: int


@njit(cache=True)
def _cost_to_go(order: np.ndarray, goal: int, bits: int, I: np.ndarray, O: np.ndarray, limits: np.ndarray,
                costs: np.ndarray, rho: np.ndarray, keys: List, steps: List) -> Dict:
    """Least cost from each node of ``order`` (known nodes, children before parents) to ``goal``
    over edges between them; nodes without such a path are left out."""
    togo = Dict.empty(types.int64, types.int64)
    togo[goal] = 0
    for u in order:
        if u == goal:
            continue
        _children(u, bits, I, O, limits, costs, rho, keys, steps)
        best = -1
        for k in range(len(keys)):
            rest = togo.get(keys[k], -1)
            if rest >= 0 and (best < 0 or steps[k] + rest < best):
                best = steps[k] + rest
        if best >= 0:
            togo[u] = best
    return togo


def near_paths(graph: _Graph, threshold: int, max_paths: int = MAX_PATHS,
               deadline: float | None = None) -> list[tuple[int, list[Node]]] | None:
    """Every path of ``graph`` from the start to the goal costing less than ``threshold``, with its
    cost (module docstring), or None when there are more than ``max_paths``, more than
    :data:`MAX_NODES` nodes or ``deadline`` passes."""
    run = _Run(graph, threshold)
    while (status := run.until(deadline, MAX_NODES)) != _EMPTY:
        if status not in (_GOAL, _RUNNING) or (deadline is not None and time.perf_counter() > deadline):
            return None
    known = np.fromiter(run.cost.keys(), dtype=np.int64, count=len(run.cost))
    mask = (1 << graph.bits) - 1
    tokens = sum((known >> (graph.bits * i)) & mask for i in range(graph.N))
    keys, steps = _new_lists()
    togo = _cost_to_go(known[np.argsort(-tokens, kind="stable")], np.int64(graph.goal), *graph.args,
                       graph.rho, keys, steps)
    found: list[tuple[int, list[int]]] = []
    stack: list[tuple[int, int, list[int]]] = [(0, 0, [0])]
    while stack:
        key, cost, path = stack.pop()
        if key == graph.goal:
            found.append((cost, path))
            if len(found) > max_paths:
                return None
            continue
        _children(np.int64(key), *graph.args, graph.rho, keys, steps)
        for child, step in zip(list(keys), list(steps)):
            rest = togo.get(child, -1)
            if rest >= 0 and cost + step + rest < threshold:
                stack.append((int(child), cost + int(step), path + [int(child)]))
    return [(cost, [graph.node(k) for k in path]) for cost, path in found]


def least_chunk_squares(instance: Instance, path: list[Node], time_limit: float | None = None) -> int | None:
    r"""Least :math:`\sum c^2 - \sum X` over the chunkings of case 2 of the module docstring for the
    path ``path`` (a proven lower bound on it when CP-SAT stops early), or None when none exists."""
    reqs, lim = instance.requests, instance.limits
    M = math.inf if lim.kv_capacity is None else lim.kv_capacity
    steps = list(zip(path, path[1:]))
    fill_batches = [j for j, ((G, res), (G2, _)) in enumerate(steps)
                    if any(G2[i] > G[i] and not res >> i & 1 for i in range(len(reqs)))]
    model = cp_model.CpModel()
    held: list[list] = [[] for _ in steps]  # partial KV of runs not yet complete, per batch
    chunks: list[list] = [[] for _ in steps]  # prefill chunks per batch
    squares, total = [], 0
    last_resident = [-1] * len(reqs)
    for j, ((G, res), (G2, res2)) in enumerate(steps):
        for i, r in enumerate(reqs):
            if G2[i] > G[i] and not res >> i & 1:  # a (re)fill of X tokens completes here
                X = r.prompt_tokens + G[i]
                window = [t for t in fill_batches if last_resident[i] < t <= j]
                c = {t: model.NewIntVar(1 if t == j else 0, X, f"c{i}_{t}") for t in window}
                model.Add(sum(c.values()) == X)
                for t, var in c.items():
                    sq = model.NewIntVar(0, X * X, f"s{i}_{t}")
                    model.AddMultiplicationEquality(sq, [var, var])
                    squares.append(sq)
                    chunks[t].append(var)
                for t in range(window[0], j):
                    held[t].append(sum(var for u, var in c.items() if u <= t))
                total += X
            if G2[i] > G[i] or res2 >> i & 1:
                last_resident[i] = j
    for j, ((G, res), (G2, res2)) in enumerate(steps):
        kv = sum(r.prompt_tokens + G2[i] - 1 for i, r in enumerate(reqs) if G2[i] > G[i] or res2 >> i & 1)
        decodes = sum(1 for i in range(len(reqs)) if G2[i] > G[i] and res >> i & 1)
        if held[j] and M < math.inf:
            model.Add(kv + sum(held[j]) <= M)
        if chunks[j]:
            model.Add(sum(chunks[j]) <= lim.prefill_budget)
            model.Add(sum(chunks[j]) + decodes <= lim.token_budget)
    model.Minimize(sum(squares))
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    if time_limit is not None:
        solver.parameters.max_time_in_seconds = max(time_limit, 0.01)
    status = solver.Solve(model)
    if status == cp_model.INFEASIBLE:
        return None
    return max(0, math.floor(solver.BestObjectiveBound()) - total)  # proven, also when stopped early; c^2 >= c


def chunk_bound(instance: Instance, upper: float, time_limit: float | None = None) -> ChunkBound:
    """The bound of the module docstring given the makespan ``upper`` of a known schedule (seconds).

    Meant for the case where the relaxation's optimum is within a few µs of ``upper``: the paths
    below ``upper - W`` are then few. Returns ``bound=None`` when they cannot all be listed and
    priced within ``time_limit``."""
    t0 = time.perf_counter()
    deadline = None if time_limit is None else t0 + time_limit
    graph = _Graph(instance, drop_dominated=False)
    if not graph.searchable:
        return ChunkBound(None, 0)
    work = math.fsum(request_work(instance))
    threshold = math.ceil((upper - work) / UNIT)
    paths = near_paths(graph, threshold, deadline=deadline)
    if paths is None:
        return ChunkBound(None, 0)
    k = Coefficients.from_cost_model(instance.cost_model)
    square = k.k_pq  # seconds per unit of sum c^2 - sum X
    best = threshold
    if paths:
        best = min(best, min(cost for cost, _ in paths) + _floor(k.k_pb))
    for cost, path in paths:
        if passed(deadline):
            return ChunkBound(None, len(paths))
        extra = least_chunk_squares(instance, path, seconds_left(deadline))
        if extra is not None:
            best = min(best, cost + _floor(square * extra))
    return ChunkBound(min(work + best * UNIT, upper), len(paths))  # T rounds U - W up


def _compile_kernel() -> None:
    """Compile (or load from numba's cache) :func:`_cost_to_go` by listing the paths of
    :mod:`.search`'s compile instance. Run at import, as there, so that no time limit pays it."""
    near_paths(_Graph(_compile_instance(), drop_dominated=False), UNBOUNDED)


_compile_kernel()
