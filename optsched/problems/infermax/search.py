r"""The residency relaxation solved exactly: its optimum as a shortest path, by A*.

The relaxation of :mod:`.relax` (notation there) charges a batch only through its flags
:math:`y_j, p_j, d_j` and its refills; between batches a request is described by :math:`G_i`
(tokens generated) and whether it is resident. So its optimum is a shortest path in the graph

- **nodes** :math:`(G, R)`: :math:`G_i \in 0..O_i` and the set R of residents, the unfinished
  requests (:math:`G_i < O_i`) that hold their KV (:math:`G_i \ge 1`); start :math:`(0, \emptyset)`,
  goal :math:`G = O`;
- **edges**: one batch with at least one generated token. Each unfinished request either generates
  a token (a *decode* when resident, a *fill* otherwise, a refill when :math:`G_i \ge 1`), or idles
  holding its KV (residents only), or holds nothing (a resident doing so is evicted). Let
  :math:`G'` be the generated tokens after the batch and S the requests that generate or idle
  holding KV. The batch needs :math:`\sum_{i \in S} (I_i + G'_i - 1) \le M`, :math:`|S| \le R_{max}`,
  at most C generating requests. After it :math:`R' = \{i \in S : G'_i < O_i\}`;
- **edge cost** :math:`k_b + k_{pb} [\text{a fill}] + \sum_{\text{refills}} \rho_i(G'_i) + \delta`,
  :math:`\delta = 0` without decodes, else :math:`\min(k_{db},\ k_{pb} [\text{no fill}] +
  \sum_{\text{decodes}} \rho_i(G'_i))`: the decodes as they are, or all of them as refills of residents
  (the relaxation allows a refill while resident, and mixing the two still pays :math:`k_{db}`).

Proof that the shortest path is the relaxation's optimum over any number of batches (hence, plus
the token work W, a lower bound on every schedule's makespan, whatever J): the cost of a path is the
objective of the point that follows it, and every point of the relaxation gives a path of at most
its objective. Take a point; drop its batches without a generated token (they cost at least
:math:`\min(k_{pb}, k_{db}) + k_b \ge 0` or nothing when empty). What is left still satisfies X2: a
request resident in a dropped batch without generating there was resident in the batch before (X2,
no fill there), so a residency chain survives the drop. Each kept batch is an edge: its residents
hold :math:`H \ge I + G' - 1` (X3) within M, R_max and C; a fill (X2: a resident of j not resident in
j - 1 has :math:`s_{ij}`) sets :math:`p_j`, a decode (:math:`x \wedge \neg s`) sets :math:`d_j`, a
refill pays :math:`\rho \ge \rho_i(G'_i)` (X5). When the point refills residents of a batch instead of
decoding them, the batch pays :math:`p_j` and their :math:`\rho`, or :math:`d_j` if some decode stays:
at least :math:`\delta` (with the fills of non-residents charged as before). Conversely a path is a
point (over as many batches as it has edges, flags as charged; the least counts :math:`B, B_p`,
the symmetry rows and the horizon J of :mod:`.relax` are dropped, which only lowers the optimum).

A* needs an admissible estimate :math:`h` of the cost from a node. With :math:`r_i = O_i - G_i`
tokens left, every path from :math:`(G, R)` has at least :math:`b` batches, :math:`f` of them with a
fill and :math:`\max(0, \max_i r_i - f)` with a decode, where

- :math:`b \ge \max_i r_i` (one token per batch per request), :math:`b \ge \lceil \sum_i \sum_{k =
  G_i + 1}^{O_i} (I_i + k - 1) / M \rceil` (the batch generating token k of request i holds its
  :math:`I_i + k - 1` KV, X3), :math:`b \ge \lceil \sum_i r_i / \min(C, R_{max}) \rceil`, :math:`b \ge f`;
- :math:`f \ge f_0 = \lceil \sum_{i \notin R,\ r_i > 0} (I_i + G_i) / M \rceil`: a non-resident
  generates next by a fill holding :math:`I_i + G_i` KV, within M per batch;
- request i's :math:`r_i` tokens come in distinct batches, each a fill or a decode.

The phase biases :math:`k_{pb} f + k_{db} \max(0, r - f)` (:math:`r = \max_i r_i`) are piecewise linear in
f, so their least value over :math:`f \ge f_0` is at :math:`f_0` or at :math:`\max(f_0, r)`, and
:math:`h = k_b b + ` that least value (refills :math:`\ge 0`). A* with an admissible h and
re-opening (a node whose cost improves is queued again) returns the shortest path when it takes
the goal from the queue; before that, every value it takes from the queue is at most the shortest
path's cost (the queue always holds a node of a shortest path with its least cost), so the largest
such value is a proven bound when the search stops early (time or memory).

Costs are integers (picoseconds, rounded down as in :mod:`.relax`): the bound never exceeds the
true value. The shortest path, as a schedule (:func:`.relax.schedule_from_point`), is a candidate
that replay judges.
"""

from __future__ import annotations

import heapq
import math
import time
from typing import Callable

from ...bounds import request_work
from ...instance import Instance
from .model import Coefficients
from .relax import UNIT, RelaxationResult, _floor, refill_line, schedule_from_point

__all__ = ["MAX_NODES", "relaxation_search"]

#: Nodes the search keeps at most (about 600 bytes each with their queue entries and parents).
MAX_NODES = 2_000_000

Node = tuple[tuple[int, ...], int]  # (G, residents as a bit set)


class _Stopped(Exception):
    """The search ran out of time or nodes while listing the edges of a node."""


class _Graph:
    """The graph of the module docstring for one instance (integer picosecond costs)."""

    def __init__(self, instance: Instance) -> None:
        k = Coefficients.from_cost_model(instance.cost_model)
        reqs = instance.requests
        lim = instance.limits
        self.N = len(reqs)
        self.I = [r.prompt_tokens for r in reqs]
        self.O = [r.output_tokens for r in reqs]
        self.M = lim.kv_capacity
        self.per_batch = min(lim.token_budget, lim.max_running or self.N or 1)
        self.R_max = lim.max_running
        self.k_b, self.k_pb, self.k_db = _floor(k.k_b), _floor(k.k_pb), _floor(k.k_db)
        lines = [refill_line(k, I) for I in self.I]
        self.rho = [[max(0, a + b * g) for g in range(O + 1)] for (a, b), O in zip(lines, self.O)]

    def estimate(self, G: tuple[int, ...], res: int) -> int:
        """Admissible h of the module docstring."""
        r_max = area = left = entry = 0
        waiting = False
        for i in range(self.N):
            r = self.O[i] - G[i]
            if r == 0:
                continue
            r_max = max(r_max, r)
            left += r
            area += r * (self.I[i] + G[i]) + r * (r - 1) // 2
            if not res >> i & 1:
                entry += self.I[i] + G[i]
                waiting = True
        f0 = (1 if self.M is None else -(-entry // self.M)) if waiting else 0
        b = max(r_max, f0, -(-left // self.per_batch), 0 if self.M is None else -(-area // self.M))
        phases = min(self.k_pb * f0 + self.k_db * max(0, r_max - f0), self.k_pb * max(f0, r_max))
        return self.k_b * b + phases

    def edges(self, G: tuple[int, ...], res: int, stop: Callable[[int], bool] = lambda n: False) -> list[tuple[Node, int]]:
        """Every edge leaving (G, res): (next node, cost), by a depth-first walk over the
        requests' choices that stops as soon as M, R_max or C is exceeded. ``stop(n)`` is asked
        every 1024 edges (n: edges so far) and ends the walk with :class:`_Stopped` when true (a
        node of a large instance can have more edges than time or memory allow)."""
        N, I, O, M = self.N, self.I, self.O, self.M
        cap = math.inf if M is None else M
        R_max = math.inf if self.R_max is None else self.R_max
        todo = [i for i in range(N) if G[i] < O[i]]
        after = list(G)
        out: list[tuple[Node, int]] = []

        def walk(t: int, kv: int, held: int, gen: int, fill: bool, refill: int, dec: int, res2: int) -> None:
            if t == len(todo):
                if gen:
                    cost = self.k_b + (self.k_pb if fill else 0) + refill
                    if dec >= 0:  # dec: the decodes' rho sum, -1 without decodes
                        cost += min(self.k_db, (0 if fill else self.k_pb) + dec)
                    out.append(((tuple(after), res2), cost))
                    if not len(out) % 1024 and stop(len(out)):
                        raise _Stopped
                return
            i = todo[t]
            kept = I[i] + G[i]  # KV held after generating a token (G' = G + 1)
            if res >> i & 1:
                if kv + kept <= cap and held < R_max and gen < self.per_batch:  # decode
                    after[i] += 1
                    stay = res2 | (1 << i) if after[i] < O[i] else res2
                    walk(t + 1, kv + kept, held + 1, gen + 1, fill, refill,
                         max(dec, 0) + self.rho[i][after[i]], stay)
                    after[i] -= 1
                if kv + kept - 1 <= cap and held < R_max:  # idle, holding its KV
                    walk(t + 1, kv + kept - 1, held + 1, gen, fill, refill, dec, res2 | (1 << i))
                walk(t + 1, kv, held, gen, fill, refill, dec, res2)  # evicted
            else:
                walk(t + 1, kv, held, gen, fill, refill, dec, res2)  # waits
                if kv + kept <= cap and held < R_max and gen < self.per_batch:  # (re)fill
                    after[i] += 1
                    stay = res2 | (1 << i) if after[i] < O[i] else res2
                    extra = self.rho[i][after[i]] if G[i] else 0
                    walk(t + 1, kv + kept, held + 1, gen + 1, True, refill + extra, dec, stay)
                    after[i] -= 1

        walk(0, 0, 0, 0, False, 0, -1, 0)
        return out


def relaxation_search(
    instance: Instance, time_limit: float | None = None, max_nodes: int = MAX_NODES
) -> RelaxationResult:
    """Shortest path of the module docstring by A*: the residency relaxation's optimum.

    Parameters
    ----------
    instance
        The instance (arrivals are ignored: they only add waiting time).
    time_limit
        Seconds; when it passes, or when more than ``max_nodes`` nodes are known, the search stops
        and returns its proven bound (status ``UNKNOWN``).

    Returns
    -------
    RelaxationResult
        ``OPTIMAL``: bound = value = W + the shortest path, with the path as a schedule;
        ``INFEASIBLE``: no path (bound ``inf``); ``UNKNOWN``: bound = W + the largest value taken
        from the queue.
    """
    cpu, t0 = time.process_time(), time.perf_counter()
    graph = _Graph(instance)
    work = math.fsum(request_work(instance))
    start: Node = (tuple([0] * graph.N), 0)
    goal = tuple(graph.O)
    cost: dict[Node, int] = {start: 0}
    parent: dict[Node, Node | None] = {start: None}
    queue = [(graph.estimate(*start), 0, start)]
    best = 0

    def stop(edges: int) -> bool:
        over = time_limit is not None and time.perf_counter() - t0 > time_limit
        return over or len(cost) + edges > max_nodes

    while queue:
        f, g, node = heapq.heappop(queue)
        best = max(best, f)
        if node[0] == goal:
            path = [node]
            while (prev := parent[path[-1]]) is not None:
                path.append(prev)
            value = work + g * UNIT
            return RelaxationResult(value, value, "OPTIMAL", time.process_time() - cpu,
                                    schedule=_schedule(instance, path[::-1]))
        if g > cost[node]:
            continue  # a stale entry: the node was queued again at a lower cost
        try:
            if stop(0):
                raise _Stopped
            out = graph.edges(*node, stop)
            for k, (nxt, step) in enumerate(out):
                if not (k + 1) % 1024 and stop(0):  # a node's children each cost an estimate
                    raise _Stopped
                g2 = g + step
                if g2 < cost.get(nxt, g2 + 1):
                    cost[nxt] = g2
                    parent[nxt] = node
                    heapq.heappush(queue, (g2 + graph.estimate(*nxt), g2, nxt))
        except _Stopped:
            return RelaxationResult(work + best * UNIT, None, "UNKNOWN", time.process_time() - cpu)
    return RelaxationResult(math.inf, None, "INFEASIBLE", time.process_time() - cpu)


def _schedule(instance: Instance, path: list[Node]):
    """The path as the relaxation point x, s, r of :mod:`.relax` (residents decode, others fill),
    turned into a schedule by :func:`.relax.schedule_from_point`."""
    N, steps = len(instance.requests), len(path) - 1
    x, s, r = ([[0] * steps for _ in range(N)] for _ in range(3))
    for j, ((G, res), (G2, res2)) in enumerate(zip(path, path[1:])):
        for i in range(N):
            x[i][j] = G2[i] - G[i]
            s[i][j] = int(x[i][j] == 1 and not res >> i & 1)
            r[i][j] = int(x[i][j] == 1 or bool(res2 >> i & 1))
    return schedule_from_point(instance, x, s, r)
