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
   (the residents' :math:`I + G' - 1`), within M, and it holds KV, so it counts with the residents
   against R_max; per batch the chunks hold P, and with the decodes C. So
   :math:`Q \ge L k_{pq} (\min \sum c^2 - \sum X) =: Q(\pi)`, the least over these chunkings (a
   small integer program, solved by CP-SAT; infeasible means no schedule has this path).

A schedule whose path costs :math:`T = U - W` or more is no better than U. So the optimum is at
least :math:`W + \min(\min_\pi (V(\pi) + Q(\pi)), V^* + \kappa, T)` over the paths
:math:`\pi` below T, and at least the same with any lower bound on each :math:`Q(\pi)`.

Over states, without listing paths (the near-optimal paths of N = 6 are a million ties). In case 2 take a fill batch
j, the last fill batch before it t* (none: nothing is prefilled before j) and the fills :math:`X_k` completing in j.
Their chunks before j lie in fill batches at or before t* and stay in memory through every batch from t* to j - 1, so
together they are at most :math:`F_j = \min_{t^* \le u < j} (M - K_u)` tokens (:math:`K_u` the path's own KV in
batch u). A fill's window may hold no earlier fill batch (a request evicted since t*, at the start
of a batch or after one), exactly one (evicted between the fill batch before t* and t*, or a
first fill with one fill batch before j): its earlier tokens :math:`a_k` are then one chunk,
costing :math:`a_k (a_k - 1)`; or more (counted as 0, :math:`c^2 \ge c`). So batch j pays at least
:math:`L k_{pq}` times the least :math:`\sum_k c_k (c_k - 1)` (plus :math:`a_k (a_k - 1)` for the
single-chunk fills) with :math:`c_k = X_k - a_k \ge 1`, :math:`\sum_k a_k \le F_j` and
:math:`a_k = 0` without an earlier fill batch (:func:`_fill_squares`: convex terms, so a greedy);
the sum over the fill batches is :math:`Q_F(\pi) \le Q(\pi)`. All of it follows the path batch by
batch: F (reset to :math:`M - K_j` at a fill batch, else the least with :math:`M - K_u`), the two
window classes of the evicted requests and the fill batches so far (up to 2). So
:math:`\min_\pi (V(\pi) + Q_F(\pi))` is a shortest path over states (node, F, classes, count) of the
near-optimal nodes (:func:`least_with_squares`, in increasing order of tokens: the graph is
acyclic). It ignores R_max, P, C, the longer windows' memory and the other fills' partial KV, so
when it stays below :math:`\min(T, V^* + \kappa)` the paths are listed (:func:`near_paths`, at most
:data:`MAX_PATHS`) and priced one by one as above, which gives at least as much. Its best path,
chunked by the per-path program, is a schedule (:func:`chunked_schedule`), which replay judges.

The paths are those of the graph with every edge (:class:`.graph.Graph` with
``drop_dominated=False``: an eviction the search drops as dominated frees memory a chunk can use).
Their nodes: A* pruned at T, run until its queue is empty, knows every node of every such path, at
a cost no greater than the path's prefix (by induction along the path: the estimate is
admissible). It also keeps the edges it finds below T, :math:`g(u) + c(u, v) + h(v) < T`, at
each expansion of u; its last expansion of u is at u's final known cost, at most the prefix of
any such path through u, so every edge of every path below T is kept (the prefix to v plus
:math:`h(v)` is at most the path's cost). So the least cost to the goal over the kept edges
(:func:`_cost_to_go`, in decreasing order of tokens generated) is, at every node of a path
below T, at most the rest of that path, and at the start it is :math:`V^*` when :math:`V^* < T`
(the kept edges are edges of the graph). It prunes both the shortest path over states and the
depth-first walk that lists the paths (it follows an edge only while some completion stays below
T), which loses no path below T. Costs are integer picoseconds rounded down, as in :mod:`.relax`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit, types
from numba.typed import Dict, List
from ortools.sat.python import cp_model

from ...bounds import request_work
from ...budget import NO_LIMIT, TimeBudget
from ...costmodel import Coefficients
from ...cpsat_solver import run_model
from ...instance import Instance
from ...result import Status
from ...schedule import Batch, Item, Schedule
from .astar import EMPTY, GOAL, RUNNING, Run
from .graph import Graph, Node, as_array, children, edge_arrays, new_lists
from .model import linear_instance
from .relax import UNIT, floor_units
from .tables import EdgeCosts

__all__ = ["ChunkBound", "chunk_bound", "chunked_schedule", "least_chunk_squares", "least_with_squares", "near_nodes",
           "near_paths"]

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
        Proven lower bound (seconds) on the makespan, at most ``upper``, or None when the nodes of
        the paths below ``upper - W`` could not all be listed (too many, or out of time).
    paths
        Paths listed and priced one by one (those below ``upper - W``; 0 when the bound over
        states sufficed or they were too many).
    schedule
        The best path over states below ``upper - W`` as a schedule with CP-SAT's chunking
        (:func:`chunked_schedule`), a candidate; None without one.
    """

    bound: float | None
    paths: int
    schedule: Schedule | None = None


@njit(cache=True)
def _cost_to_go(edges: List, goal: int, bits: int, N: int) -> Dict:
    """Least cost from each node to ``goal`` over ``edges`` ((node, child, cost), the edges A* kept:
    module docstring); nodes without such a path are left out. The edges are taken by decreasing
    tokens generated at their node: every edge generates a token, so a child's edges come first."""
    mask = (1 << bits) - 1
    tokens = np.empty(len(edges), np.int64)
    for e in range(len(edges)):
        tokens[e] = 0
        for i in range(N):
            tokens[e] -= (edges[e][0] >> (bits * i)) & mask
    togo = Dict.empty(types.int64, types.int64)
    togo[goal] = 0
    for e in np.argsort(tokens, kind="mergesort"):
        node, child, cost = edges[e]
        rest = togo.get(child, -1)
        if rest >= 0 and (togo.get(node, -1) < 0 or cost + rest < togo[node]):
            togo[node] = cost + rest
    return togo


def near_nodes(graph: Graph, threshold: int, budget: TimeBudget = NO_LIMIT) -> tuple[np.ndarray, Dict] | None:
    """The nodes of every path of ``graph`` costing less than ``threshold`` (and maybe more), in
    increasing order of tokens generated, and the least cost to the goal over the edges A* kept
    (module docstring; only nodes with such a path), or None when there are more than
    :data:`MAX_NODES` or ``budget`` expires."""
    run = Run(graph, threshold, record=True)
    while (status := run.until(budget, MAX_NODES)) != EMPTY:
        if status not in (GOAL, RUNNING) or budget.expired():
            return None
    known = run.known()
    mask = (1 << graph.bits) - 1
    tokens = sum((known >> (graph.bits * i)) & mask for i in range(graph.N))
    order = known[np.argsort(tokens, kind="stable")]
    return order, _cost_to_go(run.edges, np.int64(graph.goal), graph.bits, graph.N)


def near_paths(graph: Graph, threshold: int, max_paths: int = MAX_PATHS,
               budget: TimeBudget = NO_LIMIT) -> list[tuple[int, list[Node]]] | None:
    """Every path of ``graph`` from the start to the goal costing less than ``threshold``, with its
    cost (module docstring), or None when there are more than ``max_paths``, more than
    :data:`MAX_NODES` nodes or ``budget`` expires."""
    near = near_nodes(graph, threshold, budget)
    return None if near is None else _walk(graph, near[1], threshold, max_paths)


def _walk(graph: Graph, togo: Dict, threshold: int, max_paths: int) -> list[tuple[int, list[Node]]] | None:
    """The paths below ``threshold`` by a depth-first walk guided by ``togo`` (least costs to the
    goal), or None when there are more than ``max_paths``."""
    found: list[tuple[int, list[int]]] = []
    stack: list[tuple[int, int, list[int]]] = [(0, 0, [0])]
    while stack:
        key, cost, path = stack.pop()
        if key == graph.goal:
            found.append((cost, path))
            if len(found) > max_paths:
                return None
            continue
        kids, costs = edge_arrays(np.int64(key), *graph.args)
        for child, step, rest in zip(kids.tolist(), costs.tolist(), _lookup(togo, kids).tolist()):
            if rest >= 0 and cost + step + rest < threshold:
                stack.append((child, cost + step, path + [child]))
    return [(cost, [graph.node(k) for k in path]) for cost, path in found]


@njit(cache=True)
def _lookup(togo: Dict, keys: np.ndarray) -> np.ndarray:
    """The least costs to the goal ``togo`` at the nodes ``keys``, -1 where it has none."""
    out = np.empty(keys.shape[0], np.int64)
    for n in range(keys.shape[0]):
        out[n] = togo.get(keys[n], -1)
    return out


@njit(cache=True)
def _fill_squares(sizes: np.ndarray, earlier: np.ndarray, n: int, free: int) -> int:
    """Least :math:`\\sum_k c_k (c_k - 1) + [\\text{one earlier batch}]\\, a_k (a_k - 1)` over the
    fills k < ``n`` of sizes :math:`X_k` = ``sizes[k]`` completing in a batch, with last chunks
    :math:`c_k = X_k - a_k \\ge 1` and :math:`\\sum_k a_k \\le` ``free``, where ``earlier[k]`` is
    the number of earlier fill batches that may hold fill k's other chunks (0: :math:`a_k = 0`; 1:
    they are one chunk :math:`a_k`; 2: several, counted as 0; module docstring): a token at a time
    moved where it lowers the sum most (the terms are convex, so this greedy is optimal)."""
    moved = np.zeros(n, np.int64)
    for _ in range(free):
        pick, gain = -1, 0
        for k in range(n):
            last = sizes[k] - moved[k]
            # moving a token: c (c - 1) falls by 2 (c - 1); a (a - 1) grows by 2 a
            value = 2 * (last - 1) - (2 * moved[k] if earlier[k] == 1 else 0)
            if earlier[k] and last > 1 and value > gain:
                pick, gain = k, value
        if pick < 0:
            break
        moved[pick] += 1
    total = 0
    for k in range(n):
        last = sizes[k] - moved[k]
        total += last * (last - 1) + (moved[k] * (moved[k] - 1) if earlier[k] == 1 else 0)
    return total


@njit(cache=True)
def least_with_squares(order: np.ndarray, togo: Dict, goal: int, bits: int, I: np.ndarray, O: np.ndarray,
                       limits: np.ndarray, costs: EdgeCosts, rho: np.ndarray, square: float, upper: int,
                       keys: List, steps: List) -> tuple[int, np.ndarray]:
    """Least :math:`V(\\pi) + Q_F(\\pi)` over the paths through the nodes ``order`` (increasing
    tokens generated) that cost less than ``upper``, else ``upper``: a shortest path over states
    (node, F, E, P) of the module docstring, each fill batch charged ``square`` (picoseconds per
    unit) times :func:`_fill_squares`, rounded down; ``togo`` (the least costs to the goal) prunes.
    Also that path's node keys, goal first (empty when none costs less than ``upper``)."""
    N = I.shape[0]
    mask = (1 << bits) - 1
    shift = bits * N
    cap = 0  # more free memory than every fill's tokens together changes nothing
    for i in range(N):
        cap += I[i] + O[i] - 1
    cap = min(cap, limits[0])
    span = (3 * (cap + 1)) << (2 * N)  # codes ((F * 3 + P) << 2N) | E1 << N | E0 of one node
    index = Dict.empty(types.int64, types.int64)
    for n in range(order.shape[0]):
        index[order[n]] = n
    # states of each node as a linked list: code, cost, next, node key, parent state;
    # slot: node * span + code -> state
    codes, costs_of, nexts, at, parents = List([0]), List([0]), List([-1]), List([0]), List([-1])  # the start
    head = np.full(order.shape[0], -1, np.int64)
    head[index[0]] = 0  # the start: no fill batch yet, nothing evicted
    slot = Dict.empty(types.int64, types.int64)
    slot[index[0] * span] = 0
    sizes, earlier = np.empty(N, np.int64), np.empty(N, np.int64)
    best, last = upper, -1
    for n in range(order.shape[0]):
        if head[n] < 0:
            continue
        key = order[n]
        res = key >> shift
        children(key, bits, I, O, limits, costs, rho, keys, steps)
        state = head[n]
        while state >= 0:
            code, g = codes[state], costs_of[state]
            E0, E1 = code & ((1 << N) - 1), (code >> N) & ((1 << N) - 1)
            F, P = (code >> (2 * N)) // 3, (code >> (2 * N)) % 3
            for k in range(len(keys)):
                child = keys[k]
                rest = togo.get(child, -1)
                if rest < 0 or g + steps[k] + rest >= best:
                    continue
                res2 = child >> shift
                kv = fills = evicted = generated = held = 0  # evicted: after the batch
                for i in range(N):
                    G, G2 = (key >> (bits * i)) & mask, (child >> (bits * i)) & mask
                    if G2 > G:
                        generated |= 1 << i
                    if G2 > G or (res2 >> i) & 1:
                        held |= 1 << i
                        kv += I[i] + G2 - 1
                        if not (res2 >> i) & 1 and G2 < O[i]:
                            evicted |= 1 << i
                    if G2 > G and not (res >> i) & 1:
                        sizes[fills] = I[i] + G
                        earlier[fills] = 0 if (E0 >> i) & 1 else (1 if (E1 >> i) & 1 else P)
                        fills += 1
                free = min(max(0, limits[0] - kv), cap)
                g2 = g + steps[k]
                before = res & ~held  # evicted before the batch: it is in their windows
                if fills:
                    g2 += np.int64(np.floor(square * _fill_squares(sizes, earlier, fills, F)))
                    code2 = ((free * 3 + min(P + 1, 2)) << (2 * N)) | ((E0 & ~generated) | before) << N | evicted
                else:
                    code2 = ((min(F, free) * 3 + P) << (2 * N)) | E1 << N | E0 | before | evicted
                if g2 + rest >= best:
                    continue
                if child == goal:
                    best, last = g2, state
                    continue
                where = index[child] * span + code2
                if where in slot:
                    known = slot[where]
                    if g2 < costs_of[known]:
                        costs_of[known], parents[known] = g2, state
                else:
                    slot[where] = len(codes)
                    codes.append(code2)
                    costs_of.append(g2)
                    nexts.append(head[index[child]])
                    at.append(child)
                    parents.append(state)
                    head[index[child]] = len(codes) - 1
            state = nexts[state]
    path = List.empty_list(types.int64)
    if last >= 0:
        path.append(goal)
    while last >= 0:
        path.append(at[last])
        last = parents[last]
    return best, as_array(path)


def _chunk_model(instance: Instance, path: list[Node]) -> tuple[cp_model.CpModel, dict[tuple[int, int], dict], int]:
    r"""The integer program of case 2 of the module docstring for ``path``: the model (minimising
    :math:`\sum c^2`), each (re)fill's chunk variables ``{(i, j): {t: c_t}}`` (request i, its fill
    batch j, the fill batches t of its window) and :math:`\sum X`."""
    reqs, lim = instance.requests, instance.limits
    M = math.inf if lim.kv_capacity is None else lim.kv_capacity
    steps = list(zip(path, path[1:]))
    fill_batches = [j for j, ((G, res), (G2, _)) in enumerate(steps)
                    if any(G2[i] > G[i] and not res >> i & 1 for i in range(len(reqs)))]
    model = cp_model.CpModel()
    held: list[list] = [[] for _ in steps]  # partial KV of runs not yet complete, per batch
    running: list[list] = [[] for _ in steps]  # whether each of those holds any
    chunks: list[list] = [[] for _ in steps]  # prefill chunks per batch
    runs: dict[tuple[int, int], dict] = {}
    squares, total = [], 0
    last_resident = [-1] * len(reqs)
    for j, ((G, res), (G2, res2)) in enumerate(steps):
        for i, r in enumerate(reqs):
            if G2[i] > G[i] and not res >> i & 1:  # a (re)fill of X tokens completes here
                X = r.prompt_tokens + G[i]
                window = [t for t in fill_batches if last_resident[i] < t <= j]
                c = {t: model.NewIntVar(1 if t == j else 0, X, f"c{i}_{t}") for t in window}
                model.Add(sum(c.values()) == X)
                runs[i, j] = c
                for t, var in c.items():
                    sq = model.NewIntVar(0, X * X, f"s{i}_{t}")
                    model.AddMultiplicationEquality(sq, [var, var])
                    squares.append(sq)
                    chunks[t].append(var)
                for t in range(window[0], j):
                    partial = sum(var for u, var in c.items() if u <= t)
                    started = model.NewBoolVar(f"p{i}_{j}_{t}")  # holds KV in t (R_max counts it)
                    model.Add(partial <= X * started)
                    held[t].append(partial)
                    running[t].append(started)
                total += X
            if G2[i] > G[i] or res2 >> i & 1:
                last_resident[i] = j
    for j, ((G, res), (G2, res2)) in enumerate(steps):
        kv = sum(r.prompt_tokens + G2[i] - 1 for i, r in enumerate(reqs) if G2[i] > G[i] or res2 >> i & 1)
        decodes = sum(1 for i in range(len(reqs)) if G2[i] > G[i] and res >> i & 1)
        if held[j] and M < math.inf:
            model.Add(kv + sum(held[j]) <= M)
        if running[j] and lim.max_running is not None:
            residents = sum(1 for i in range(len(reqs)) if G2[i] > G[i] or res2 >> i & 1)
            model.Add(residents + sum(running[j]) <= lim.max_running)
        if chunks[j]:
            model.Add(sum(chunks[j]) <= lim.prefill_budget)
            model.Add(sum(chunks[j]) + decodes <= lim.token_budget)
    model.Minimize(sum(squares))
    return model, runs, total


def least_chunk_squares(instance: Instance, path: list[Node], budget: TimeBudget | None = None) -> int | None:
    r"""Least :math:`\sum c^2 - \sum X` over the chunkings of case 2 of the module docstring for the
    path ``path`` (a proven lower bound on it when CP-SAT stops early), or None when none exists."""
    model, _, total = _chunk_model(instance, path)
    run = run_model(model, budget=budget)
    if run.status == Status.INFEASIBLE:
        return None
    return max(0, math.floor(run.bound) - total)  # proven, also when stopped early; c^2 >= c


def chunked_schedule(instance: Instance, path: list[Node], budget: TimeBudget | None = None) -> Schedule | None:
    """The path as a schedule whose (re)fills are chunked as CP-SAT's best chunking of case 2 (None
    without one): a candidate, which replay judges.

    Each batch of the path holds its decodes, its (re)fills' last chunks and the earlier chunks
    of later (re)fills; a resident that holds no KV in a batch is evicted there, or, when it puts a
    chunk in that batch, in an eviction-only batch just before (an evicted request takes no item
    in its batch)."""
    model, runs, _ = _chunk_model(instance, path)
    solved = run_model(model, budget=budget)
    if not solved.found:
        return None
    reqs = instance.requests
    chunks: dict[int, dict[int, int]] = {}  # batch -> request -> tokens
    for (i, _), run in runs.items():
        for t, var in run.items():
            if solved.value(var):
                chunks.setdefault(t, {})[i] = solved.value(var)
    batches: list[Batch] = []
    for j, ((G, res), (G2, res2)) in enumerate(zip(path, path[1:])):
        here = chunks.get(j, {})
        items = [Item(reqs[i].id, tokens) for i, tokens in here.items()]
        evict, before = [], []
        for i, req in enumerate(reqs):
            if G2[i] > G[i] and res >> i & 1:
                items.append(Item(req.id, 1))
            elif res >> i & 1 and not res2 >> i & 1 and G2[i] == G[i]:
                (before if i in here else evict).append(req.id)
        if before:
            batches.append(Batch((), tuple(before)))
        batches.append(Batch(tuple(items), tuple(evict)))
    return Schedule(instance.name, tuple(batches), {"policy": "residency-relaxation-chunked"})


def chunk_bound(instance: Instance, upper: float, budget: TimeBudget = NO_LIMIT) -> ChunkBound:
    """The bound of the module docstring given the makespan ``upper`` of a known schedule (seconds).

    Meant for the case where the relaxation's optimum is within a few µs of ``upper``: the paths
    below ``upper - W`` are then few, or share few nodes. First the bound over states (node, F);
    when it does not reach the least of T and :math:`V^* + \\kappa`, the paths are listed and priced
    one by one (a bound at least as high). Returns ``bound=None`` when the nodes cannot all be
    listed within ``budget``."""
    budget = budget.share(1.0)  # what is left, its length known: the patterns take a part of it
    instance = linear_instance(instance)  # the costs every bound reads (model docstring)
    graph = Graph(instance, drop_dominated=False)
    if not graph.searchable:
        return ChunkBound(None, 0)
    graph.add_chosen_patterns(budget)
    work = math.fsum(request_work(instance))
    threshold = math.ceil((upper - work) / UNIT)
    near = near_nodes(graph, threshold, budget)

    if near is None:
        return ChunkBound(None, 0)
    order, togo = near
    k = Coefficients.of(instance.cost_model).folded()
    optimum = int(_lookup(togo, np.zeros(1, np.int64))[0])  # V* when below T, else -1
    cap = threshold if optimum < 0 else min(threshold, optimum + floor_units(k.prefill_bias))  # T, V* + kappa
    keys, steps = new_lists()
    best, nodes = least_with_squares(order, togo, np.int64(graph.goal), *graph.args, k.prefill_per_token_sq / UNIT,
                                      np.int64(cap), keys, steps)
    schedule = None if not len(nodes) else chunked_schedule(
        instance, [graph.node(key) for key in nodes.tolist()[::-1]], budget)
    paths = None if best == cap or budget.expired() else _walk(graph, togo, threshold, MAX_PATHS)
    if paths:
        priced = cap
        for cost, path in paths:
            if budget.expired():
                break
            extra = least_chunk_squares(instance, path, budget)
            if extra is not None:
                priced = min(priced, cost + floor_units(k.prefill_per_token_sq * extra))
        else:
            best = max(best, priced)
    return ChunkBound(min(work + best * UNIT, upper), 0 if paths is None else len(paths), schedule)  # T: U - W up
