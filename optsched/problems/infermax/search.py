r"""The residency relaxation solved exactly: its optimum as a shortest path, by beams then A*.

The relaxation of :mod:`.relax` is a shortest path in the graph of :mod:`.graph` (proof there); its
cost plus the token work W is a lower bound on every schedule's makespan. :func:`relaxation_search`
tabulates the graph's patterns (:mod:`.tables`, within :data:`~.graph.PATTERN_SHARE` of the time
limit), looks for paths by beam searches (the best nodes by g + h of each batch only, widths
:data:`BEAM_WIDTHS`; they prove nothing), then proves the optimum by A* pruned at the best path
found (:mod:`.astar`: an empty queue proves the best path the shortest; stopped early, the largest
value taken from the queue is a proven bound).

The relaxation ignores the prefill budget P (a (re)fill may be chunked over earlier batches), so
its shortest path, as a schedule that prefills each (re)fill whole in its batch, can exceed P or C.
So when every request's largest fill fits P and C whole and the best beam path does not hold them,
each beam width runs again over the edges that hold P and C that way (a subgraph,
:attr:`.graph.Graph.budget_args`: its paths are paths of the graph at the same cost, and prune A*
as well), and the best path holding them is the schedule returned unless the shortest path holds
them too. The path returned, as a schedule (:func:`path_schedule`), is a candidate that replay
judges.
"""

from __future__ import annotations

import math
import time

import numpy as np
from numba import njit, types
from numba.typed import Dict, List

from ...bounds import request_work
from ...budget import NO_LIMIT, TimeBudget
from ...instance import Instance
from ...result import Status
from .astar import EMPTY, GOAL, Run
from .graph import Graph, Node, as_array, children, new_lists, node_estimate
from .model import linear_instance
from .relax import UNBOUNDED, UNIT, RelaxationResult, schedule_from_point
from .tables import EdgeCosts

__all__ = [
    "BEAM_SHARE",
    "BEAM_WIDTHS",
    "MAX_NODES",
    "beam_search",
    "load_kernels",
    "path_schedule",
    "relaxation_search",
]

#: Nodes the search keeps at most (about 150 bytes each with their queue entries and parents: 3 GB).
MAX_NODES = 20_000_000

#: Widths of the beam searches that look for paths before A* (each keeps the nodes of least g + h
#: per batch; wider finds better paths, slower), and the share of the time limit they get together.
BEAM_WIDTHS = (64, 256, 1024, 4096)
BEAM_SHARE = 0.5


@njit(cache=True)
def _beam_layer(
    layer: np.ndarray,
    node_keys: List,
    node_costs: List,
    node_parents: List,
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
    width: int,
    upper: int,
) -> tuple[np.ndarray, int, int]:
    """One layer of a beam search: the children of the nodes ``layer`` (indices into the kept
    nodes' lists) with g + h below ``upper``, each at its least cost; the ``width`` of least g + h
    that are not the goal are kept (appended to the lists) as the next layer, and so is a goal
    reached below ``upper``.

    Returns (next layer, the least cost of a path to the goal found or ``upper``, the index of its
    goal node or -1)."""
    index = Dict.empty(types.int64, types.int64)
    child_keys = List.empty_list(types.int64)
    child_costs = List.empty_list(types.int64)
    child_parents = List.empty_list(types.int64)
    priority = List.empty_list(types.int64)
    reached = -1
    for a in layer:
        children(node_keys[a], bits, I, O, limits, costs, rho, keys, steps)
        for k in range(len(keys)):
            child, g2 = keys[k], node_costs[a] + steps[k]
            if child in index:  # its h is known: priority - cost (one at or above upper is not kept)
                j = index[child]
                if g2 < child_costs[j]:
                    child_costs[j], child_parents[j], priority[j] = g2, a, priority[j] - child_costs[j] + g2
                continue
            h = node_estimate(child, bits, I, O, limits, costs, rho, pat, table, upper - g2)
            if g2 + h >= upper:
                continue
            if child == goal:
                upper, reached = g2, len(node_keys)
                node_keys.append(child)
                node_costs.append(g2)
                node_parents.append(a)
            else:
                index[child] = len(child_keys)
                child_keys.append(child)
                child_costs.append(g2)
                child_parents.append(a)
                priority.append(g2 + h)
    order = np.argsort(np.asarray(priority), kind="mergesort")
    nxt = np.empty(min(width, order.shape[0]), np.int64)
    n = 0
    for j in order:
        if n == nxt.shape[0] or priority[j] >= upper:
            break
        nxt[n] = len(node_keys)
        node_keys.append(child_keys[j])
        node_costs.append(child_costs[j])
        node_parents.append(child_parents[j])
        n += 1
    return nxt[:n], upper, reached


def beam_search(
    graph: Graph, width: int, upper: int, budget: TimeBudget, budgets: bool = False
) -> tuple[int, list[Node] | None, float]:
    """A beam search of ``width`` nodes per layer (layers = batches), over the subgraph of the
    edges that hold P and C (:attr:`Graph.budget_args`) when ``budgets``, pruned at ``upper``,
    until its beam empties or ``budget`` expires (checked between layers): (least path cost found
    or ``upper``, that path or None, the slowest layer's seconds)."""
    node_keys, node_costs, node_parents = _beam_start()
    keys, steps = new_lists()
    layer, path, slowest = np.zeros(1, np.int64), None, 0.0
    while layer.shape[0] and not budget.expired():
        tic = time.perf_counter()
        layer, upper, reached = _beam_layer(
            layer,
            node_keys,
            node_costs,
            node_parents,
            np.int64(graph.goal),
            *(graph.budget_args if budgets else graph.args),
            *graph.patterns,
            keys,
            steps,
            width,
            np.int64(upper),
        )
        slowest = max(slowest, time.perf_counter() - tic)
        if reached >= 0:
            path = [graph.node(k) for k in _beam_trace(node_keys, node_parents, np.int64(reached)).tolist()[::-1]]
    return upper, path, slowest


@njit(cache=True)
def _beam_start() -> tuple[List, List, List]:
    """The kept nodes' lists of a beam search (keys, costs, parents' indices): the start alone."""
    node_keys = List.empty_list(types.int64)
    node_costs = List.empty_list(types.int64)
    node_parents = List.empty_list(types.int64)
    node_keys.append(0)
    node_costs.append(0)
    node_parents.append(-1)
    return node_keys, node_costs, node_parents


@njit(cache=True)
def _beam_trace(node_keys: List, node_parents: List, last: int) -> np.ndarray:
    """The keys of the kept nodes from index ``last`` back to the start, by their parents' indices."""
    keys = List.empty_list(types.int64)
    while last >= 0:
        keys.append(node_keys[last])
        last = node_parents[last]
    return as_array(keys)


def _beam_paths(graph: Graph, budget: TimeBudget) -> tuple[int, list[Node] | None, tuple[int, list[Node]] | None]:
    """Beam searches of widths :data:`BEAM_WIDTHS` in turn within ``budget`` (a width is not
    started when its layers, predicted from the narrower one's slowest, would overrun it), each
    pruned at the best path so far. When the best path does not hold P and C with its (re)fills
    prefilled whole and they fit whole (:attr:`Graph.whole_fills_fit`), the width is searched
    again over the edges that hold them, pruned at the best such path.

    Returns (least path cost or :data:`UNBOUNDED`, that path or None, (cost, path) of the best
    path holding P and C or None)."""
    upper, path, held, slowest = UNBOUNDED, None, None, 0.0
    for narrower, width in zip((0,) + BEAM_WIDTHS, BEAM_WIDTHS):
        # a layer of this width takes about width / narrower times the narrower one's slowest
        if budget.limited and narrower and slowest * width / narrower > (budget.left() or 0.0):
            break
        upper, found, slowest = beam_search(graph, width, upper, budget)
        path = found or path
        if path is not None and graph.within_budgets(path):
            held = (upper, path)
        elif graph.whole_fills_fit:
            cost, found, slow = beam_search(graph, width, UNBOUNDED if held is None else held[0], budget, True)
            slowest = max(slowest, slow)
            held = held if found is None else (cost, found)
            if held is not None and held[0] < upper:
                upper, path = held
    return upper, path, held


def relaxation_search(
    instance: Instance, budget: TimeBudget = NO_LIMIT, max_nodes: int = MAX_NODES
) -> RelaxationResult:
    """Shortest path of the module docstring: the residency relaxation's optimum.

    First beam searches (widths :data:`BEAM_WIDTHS`, together at most :data:`BEAM_SHARE` of
    ``budget``) find paths fast, each keeping only what could beat the best path so far; then
    A* with the same pruning proves the optimum: when its queue empties, the best path is the
    shortest.

    Parameters
    ----------
    instance
        The instance (arrivals are ignored: they only add waiting time).
    budget
        The search's time; when it expires, or when more than ``max_nodes`` nodes are known, the search stops
        and returns its proven bound (status ``UNKNOWN``).

    Returns
    -------
    RelaxationResult
        ``OPTIMAL``: bound = W + the shortest path; ``INFEASIBLE``: no path (bound ``inf``);
        ``UNKNOWN``: bound = W + the largest value A* took from its queue (at most the best
        path's), or W + the start's estimate when the instance is not searched
        (:attr:`Graph.searchable`: too many requests, or nodes that do not fit a key). With a
        path found, value = W + its cost and schedule = the path as a schedule: the shortest (or
        best) path found, or, when that one breaks P or C with each (re)fill prefilled whole in its
        batch, the best path found that holds them, if any (:func:`_beam_paths`).
    """
    cpu = time.process_time()
    instance = linear_instance(instance)  # the costs every bound reads (model docstring)
    graph = Graph(instance)
    work = math.fsum(request_work(instance))
    if not graph.searchable:  # the start (key 0) has every field 0, whatever their width
        root = node_estimate(np.int64(0), 0, *graph.args[1:], *graph.patterns, UNBOUNDED)
        return RelaxationResult(
            bound=work + root * UNIT, value=None, status=Status.UNKNOWN, cpu=time.process_time() - cpu
        )
    budget = budget.share(1.0)  # what is left, its length known: the parts below are of it
    graph.add_chosen_patterns(budget)
    upper, path, held = _beam_paths(graph, budget.share(BEAM_SHARE))
    run = Run(graph, upper)
    status = run.until(budget, max_nodes)

    cpu = time.process_time() - cpu
    if status == EMPTY and path is None:
        return RelaxationResult(bound=math.inf, value=None, status=Status.INFEASIBLE, cpu=cpu)
    if status == GOAL:
        upper, path = run.value, run.path()
    solved = status in (GOAL, EMPTY)  # no path below the best one: it is the shortest
    bound = work + (upper if solved else min(run.best, upper)) * UNIT
    if held is not None and not graph.within_budgets(path):
        upper, path = held  # the best path known to hold P and C: its schedule can replay
    value = None if path is None else work + upper * UNIT
    schedule = None if path is None else path_schedule(graph, instance, path)
    return RelaxationResult(
        bound=bound, value=value, status=Status.OPTIMAL if solved else Status.UNKNOWN, cpu=cpu, schedule=schedule
    )


def path_schedule(graph: Graph, instance: Instance, path: list[Node]):
    r"""The path as the relaxation point x, s, r of :mod:`.relax`, turned into a schedule by
    :func:`.relax.schedule_from_point`: non-residents fill; residents decode, or are refilled (evicted
    just before) in a batch whose edge cost takes the refill branch of :math:`\delta` (module
    docstring: :math:`k_{pb} [\text{no fill}] + \sum \rho_i < k_{db}`) when its fills and those
    refills, prefilled whole, hold P and C."""
    N, steps = len(instance.requests), len(path) - 1
    k_pb, k_db = graph.costs.prefill_bias, graph.costs.decode_bias
    cap = min(instance.limits.prefill_budget, instance.limits.token_budget)
    x, s, r = ([[0] * steps for _ in range(N)] for _ in range(3))
    for j, ((G, res), (G2, res2)) in enumerate(zip(path, path[1:])):
        decodes = [i for i in range(N) if G2[i] > G[i] and res >> i & 1]
        fills = [i for i in range(N) if G2[i] > G[i] and not res >> i & 1]
        refill = bool(decodes) and k_pb * (not fills) + sum(graph.rho[i, G2[i]] for i in decodes) < k_db
        refill = refill and sum(graph.I[i] + G[i] for i in decodes + fills) <= cap
        for i in range(N):
            x[i][j] = G2[i] - G[i]
            s[i][j] = int(i in fills or (refill and i in decodes))
            r[i][j] = int(x[i][j] == 1 or bool(res2 >> i & 1))
    return schedule_from_point(instance, x, s, r)


#: Whether :func:`load_kernels` ran in this process.
_LOADED: list[bool] = []


def load_kernels() -> None:
    """Load the search's kernels from numba's disk cache, or compile them on an empty cache, by
    solving a three-request instance, once per process. Callers with a clock call it before
    their clock starts: loading takes about a second (compiling, on an empty cache, a minute),
    which would otherwise come out of the search's share of the time."""
    if _LOADED:
        return
    from ...instance import parse_instance

    relaxation_search(
        parse_instance(
            {
                "name": "kernels",
                "cost_model": "llama2-7b-a100",
                "limits": {"kv_capacity": 6},
                "requests": [
                    {"id": "a", "prompt_tokens": 2, "output_tokens": 3},
                    {"id": "b", "prompt_tokens": 3, "output_tokens": 2},
                    {"id": "c", "prompt_tokens": 1, "output_tokens": 2},
                ],
            },
            "kernels",
        )
    )
    _LOADED.append(True)
