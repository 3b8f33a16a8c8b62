r"""The residency relaxation's graph: its optimum is a shortest path, with an admissible estimate.

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

**Estimate.** A* (:mod:`.astar`) needs an admissible estimate :math:`h` of the cost from a node.
With :math:`r_i = O_i - G_i` tokens left, every path from :math:`(G, R)` has at least :math:`b`
batches, :math:`f` of them with a fill, where

- :math:`b \ge \max_i r_i` (one token per batch per request), :math:`b \ge \lceil \sum_i \sum_{k =
  G_i + 1}^{O_i} (I_i + k - 1) / M \rceil` (the batch generating token k of request i holds its
  :math:`I_i + k - 1` KV, X3), :math:`b \ge \lceil \sum_i r_i / \min(C, R_{max}) \rceil`, :math:`b \ge f`;
- :math:`f \ge f_0 = \lceil \sum_{i \notin R,\ r_i > 0} (I_i + G_i) / M \rceil`: a non-resident
  generates next by a fill holding :math:`I_i + G_i` KV, within M per batch;
- every edge generates a token, so an edge without a fill has decodes and costs at least
  :math:`k_b + \min(k_{db}, k_{pb})` (:math:`\delta`, with :math:`\rho \ge 0`); an edge with a fill
  costs at least :math:`k_b + k_{pb}`.

So a path costs at least :math:`k_b b + k_{pb} f + \min(k_{db}, k_{pb}) (b - f)`, increasing in b
and f (:math:`k_{pb} \ge \min(k_{db}, k_{pb})`), plus its refill extras, which an edge pays on top
of :math:`k_b`, :math:`k_{pb}` and :math:`\delta`. An evicted request (:math:`i \notin R`,
:math:`1 \le G_i < O_i`) generates its next token by a refill, which pays :math:`\rho_i(g) \ge
\min(\rho_i(G_i + 1), \rho_i(O_i))` for some :math:`g \in G_i + 1..O_i` (:math:`\rho_i` is
monotone in g), once per such request. So :math:`h = k_b b + k_{pb} f_0 + \min(k_{db}, k_{pb}) (b -
f_0) + \sum_{i \notin R,\ 1 \le G_i < O_i} \min(\rho_i(G_i + 1), \rho_i(O_i))` with b the largest
of the counts above (:math:`b \ge f_0`).

**Patterns** see what the counts above miss, the memory that the heaviest requests cannot share
over time. For a *pattern* P, some of the requests, let :math:`h^*_P` be the least cost to the goal
in the graph of the requests of P alone (same M, C, R_max and costs), tabulated for every one of its
nodes (:mod:`.tables`). Then :math:`h^*_P(G_P, R \cap P)` at the projection of a node is
admissible: a path from :math:`(G, R)` projects onto a path of P's graph from the projection at no
greater cost. Keep the batches that generate a token of P (the others cost :math:`\ge 0`); a
request of P evicted in a dropped batch is evicted in the next kept one (it holds nothing there),
and none is refilled in a dropped batch (a refill generates a token). A kept batch holds a subset
of what it held (within M, R_max and C) and costs :math:`k_b` plus :math:`k_{pb}` when P fills
(the batch fills too), P's refill extras (some of the batch's) and :math:`\delta_P = \min(k_{db},
k_{pb} [\text{no fill of P}] + \sum_{\text{decodes of P}} \rho_i)` (0 without decodes of P):
with a fill of P, :math:`\delta_P \le \delta`; with a fill outside P only, the batch pays
:math:`k_{pb} + \delta \ge \delta_P`; without fills, :math:`\delta = \min(k_{db}, k_{pb} +
\sum \rho_i) \ge \delta_P`. The batch's refill extras of requests outside P are not in that
projected cost, so they come on top: an evicted request outside P refills later, in a kept batch
(the inequalities above hold with them added to both sides) or in a dropped one (which costs at
least its extras), paying at least :math:`\min(\rho_i(G_i + 1), \rho_i(O_i))` as in h. So the
estimate is the largest of h above and, over the patterns tabulated, :math:`h^*_P` plus those
least extras of the evicted requests outside P (:meth:`Graph.pattern_choice`: windows of the
requests ranked by :math:`I_i + O_i - 1`, the heaviest first; no path in a pattern's graph means
none in the whole graph). The tables hold the least costs with every edge, which the dropped
edges below do not change.

**Residents dominate.** A node :math:`(G, R \cup \{i\})` reached at cost g is at least as good as
:math:`(G, R)` reached at cost :math:`g' \ge g`, because every edge from :math:`(G, R)` has a twin of
no greater cost from :math:`(G, R \cup \{i\})` into the same node: the same choices, with i
evicted where the edge has it wait (free) and decoding where the edge refills it (the same KV
:math:`I_i + G_i`; the cost :math:`k_{pb}[F] + \min(k_{db}, k_{pb}[\neg F] + D + \rho_i)` with F the
other fills and D the other decodes' :math:`\rho` is at most the refill's :math:`k_{pb} + \rho_i +
\min(k_{db}, D)`, or :math:`k_{pb} + \rho_i` without other decodes). So the graph drops an edge
that evicts a resident able to idle instead within M and R_max (:func:`idling_fits`; with
``drop_dominated``): its sibling that idles it has the same G, one more resident and the same cost.
Some shortest path survives (follow any shortest path; where it evicts a resident that could idle,
keep the resident and take the twins from then on, whose costs do not grow).

**Kernels.** Costs are integers (picoseconds, rounded down as in :mod:`.relax`): a bound from them
never exceeds the true value. A node is a 62-bit key (:meth:`Graph.key`); an instance whose nodes
do not fit (N (bits of max O + 1) > 62), or with more than :data:`MAX_REQUESTS` requests (up to
:math:`3^N` edges per node, listed without a clock), is not searched (:attr:`Graph.searchable`).
The kernels (:func:`children`, :func:`node_estimate`, :func:`.tables.patterns_at`) are compiled by
numba at their first call and cached on disk. Typed containers are made, read and changed only
inside compiled functions (:func:`new_lists`, :func:`edge_arrays`, :func:`as_array`): their
methods, called from Python, would compile anew in every process. numba's cache does not notice a
change to a kernel defined in another module that a cached kernel calls, nor to a module-level
constant: after editing one, delete the numba files (``*.nbi``, ``*.nbc``) under the package's
``__pycache__`` folders.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.typed import List

from ...budget import NO_LIMIT, TimeBudget
from ...costmodel import Coefficients
from ...instance import Instance
from .relax import UNBOUNDED, floor_units, refill_line
from .tables import LARGEST_TABLE, EdgeCosts, patterns_at, table_entries, table_seconds, tabulated

__all__ = ["MAX_REQUESTS", "PATTERN_ENTRIES", "PATTERN_SIZE", "Graph", "Node", "as_array", "children", "edge_arrays",
           "new_lists", "node_estimate"]

#: Bits of a node's key: N fields of ``bits`` bits (G_i) and N residency bits must fit.
KEY_BITS = 62

#: Most requests searched: a node has up to 3^N edges (59,049 at N = 10), listed without a clock.
MAX_REQUESTS = 10

#: Outputs searched are below 2^MAX_BITS tokens.
MAX_BITS = 16

#: Most requests in a pattern; most entries in the tables of one graph together when there are
#: more patterns than the heaviest (1.07 GB: at N = 8 a second window of 6 costs more time than its
#: nodes save); and the share of the search's time limit the tables may take together (a pattern
#: is started only when its table should be done by then).
PATTERN_SIZE = 6
PATTERN_ENTRIES = 1 << 27
PATTERN_SHARE = 0.5

Node = tuple[tuple[int, ...], int]  # (G, residents as a bit set)


class Graph:
    """The graph of the module docstring for one instance: integer picosecond costs and the kernel
    arguments; ``edges`` and ``estimate`` in tuple form (for tests and the path's schedule). With
    ``drop_dominated=False`` it keeps the edges that evict a resident able to idle (every path of
    the relaxation, for :mod:`.chunks`)."""

    def __init__(self, instance: Instance, drop_dominated: bool = True) -> None:
        k = Coefficients.of(instance.cost_model.linear_twin()).folded()  # model docstring
        reqs = instance.requests
        lim = instance.limits
        self.N = len(reqs)
        self.I = np.array([r.prompt_tokens for r in reqs], dtype=np.int64)
        self.O = np.array([r.output_tokens for r in reqs], dtype=np.int64)
        self.bits = max(1, int(self.O.max(initial=0)).bit_length())
        #: Whether the search runs: at most MAX_REQUESTS requests (3^N edges per node), outputs
        #: below 2^MAX_BITS (the refill table has a row of O_i + 1 entries each) and a 62-bit key.
        self.searchable = self.N <= MAX_REQUESTS and self.bits <= MAX_BITS and self.N * (self.bits + 1) <= KEY_BITS
        huge = np.iinfo(np.int64).max // 4
        self.limits = np.array([huge if lim.kv_capacity is None else lim.kv_capacity,
                                min(lim.token_budget, lim.max_running or self.N or 1),
                                huge if lim.max_running is None else lim.max_running, huge, huge,
                                int(drop_dominated)], dtype=np.int64)
        #: Every request's largest (re)fill fits P and C whole: beams can then look for paths whose
        #: batches hold P and C with each (re)fill prefilled whole (:attr:`budget_args`).
        self.whole_fills_fit = bool(np.all(self.I + self.O - 1 <= min(lim.prefill_budget, lim.token_budget)))
        strict = self.limits.copy()
        strict[3:5] = lim.prefill_budget, lim.token_budget
        k_b, k_pb, k_db = floor_units(k.base), floor_units(k.prefill_bias), floor_units(k.decode_bias)
        self.costs = EdgeCosts(k_b, k_pb, k_db, min(k_db, k_pb))
        width = int(self.O.max(initial=0)) + 1 if self.searchable else 0
        self.rho = np.zeros((self.N, width), dtype=np.int64)  # rho_i(g), g = 0..O_i
        for i in range(self.N if self.searchable else 0):
            a, b = refill_line(k, int(self.I[i]))
            self.rho[i, : self.O[i] + 1] = np.maximum(0, a + b * np.arange(self.O[i] + 1, dtype=np.int64))
        self.goal = self.key(tuple(int(o) for o in self.O), 0)
        #: The arguments every kernel takes after the node.
        self.args = (self.bits, self.I, self.O, self.limits, self.costs, self.rho)
        #: The kernels' arguments for the subgraph of the edges whose (re)fills, prefilled whole in
        #: the batch, and decodes hold P and C.
        self.budget_args = (self.bits, self.I, self.O, strict, self.costs, self.rho)
        #: The pattern tables (:meth:`add_patterns`) the estimate reads: (rows, tables), none yet.
        self.patterns = (np.zeros((0, 2 * self.N + 1), dtype=np.int64), np.zeros(0, dtype=np.int64))

    def add_patterns(self, patterns: list[tuple[int, ...]], budget: TimeBudget = NO_LIMIT) -> None:
        """Tabulate the least cost to the goal of every node of each pattern's graph (the requests
        of the pattern alone, :func:`.tables.pattern_table`) for the estimate, which then also takes the
        largest entry at the node's projections (module docstring). A pattern is not started when
        its table should not be done within ``budget`` (:data:`.tables.ENTRY_SECONDS` an
        entry), and dropped, with the patterns after it, when it is not
        (a slower or loaded machine)."""
        rows = np.zeros((len(patterns), 2 * self.N + 1), dtype=np.int64)
        tables = []
        offset = 0
        for row, members in zip(rows, patterns):
            if budget.limited and (budget.left() or 0.0) < self.table_seconds(members):
                break
            table = tabulated(self._pattern_args(members), budget)
            if table is None:
                break
            m = np.array(members, dtype=np.int64)
            row[0] = offset  # then 2^k times the G state's mixed radix, plus the residents' bits
            row[1 + m] = np.cumprod(np.concatenate(([1], self.O[m][:-1] + 1))) << len(m)
            row[1 + self.N + m] = 1 << np.arange(len(m))
            tables.append(table)
            offset += len(table)
        whole = tables[0] if len(tables) == 1 else np.concatenate(tables) if tables else np.zeros(0, dtype=np.int64)
        self.patterns = (rows[: len(tables)], whole)  # one table is not copied (it may hold 2 GB)

    def add_chosen_patterns(self, budget: TimeBudget) -> None:
        """:meth:`add_patterns` of :meth:`pattern_choice` within :data:`PATTERN_SHARE` of
        ``budget`` (:meth:`~optsched.budget.TimeBudget.part`; without a limit every pattern chosen
        without a clock)."""
        part = budget.part(PATTERN_SHARE)
        self.add_patterns(self.pattern_choice(part.length), part)

    def pattern_choice(self, seconds: float | None = None) -> list[tuple[int, ...]]:
        """The patterns worth tabulating: the requests ranked by their largest KV need
        :math:`I_i + O_i - 1` (the ones memory cannot hold together), the pattern of the k
        heaviest, then of each next window of k in that rank while the tables stay within
        :data:`PATTERN_ENTRIES` entries together, with k the largest size up to
        :data:`PATTERN_SIZE` and below N whose heaviest pattern's table has at most
        :data:`.tables.LARGEST_TABLE` entries and should take at most ``seconds``; none below 3 requests
        (a pattern of one request adds nothing to the estimate's counts)."""
        rank = [int(i) for i in np.argsort(-(self.I + self.O), kind="stable")]
        for k in range(min(PATTERN_SIZE, self.N - 1), 1, -1):
            heaviest = tuple(sorted(rank[:k]))
            if self.table_entries(heaviest) <= LARGEST_TABLE and (seconds is None or self.table_seconds(heaviest) <= seconds):
                chosen, entries = [heaviest], self.table_entries(heaviest)
                for window in (tuple(sorted(rank[j: j + k])) for j in range(1, self.N - k + 1)):
                    if entries + self.table_entries(window) <= PATTERN_ENTRIES:
                        chosen.append(window)
                        entries += self.table_entries(window)
                return chosen
        return []

    def table_entries(self, members: tuple[int, ...]) -> int:
        """Entries of the table of the pattern ``members`` (:func:`.tables.table_entries`)."""
        return table_entries(self.O[list(members)])

    def table_seconds(self, members: tuple[int, ...]) -> float:
        """Seconds the table of the pattern ``members`` should take (:func:`.tables.table_seconds`)."""
        return table_seconds(self._pattern_args(members))

    def _pattern_args(self, members: tuple[int, ...]) -> tuple:
        """The arguments of :func:`.tables.pattern_table` for the pattern ``members``: the limits M, C and
        R_max only (the relaxation's graph has no prefill or token cap; the table is the same
        whether dominated evictions are dropped or not, module docstring)."""
        m = np.array(members, dtype=np.int64)
        return self.I[m], self.O[m], self.limits[:3].copy(), self.costs, self.rho[m]

    def key(self, G: tuple[int, ...], res: int) -> int:
        """The node's 62-bit key: G_i in bits [bits i, bits (i + 1)), the residents above."""
        return sum(g << (self.bits * i) for i, g in enumerate(G)) | res << (self.bits * self.N)

    def node(self, key: int) -> Node:
        """Inverse of :meth:`key`."""
        mask = (1 << self.bits) - 1
        return tuple(key >> (self.bits * i) & mask for i in range(self.N)), key >> (self.bits * self.N)

    def within_budgets(self, path: list[Node]) -> bool:
        """Whether every batch of ``path``, each (re)fill prefilled whole in it, holds P and C: each
        step is an edge of the subgraph of :attr:`budget_args`."""
        for node, nxt in zip(path, path[1:]):
            keys, _ = edge_arrays(np.int64(self.key(*node)), *self.budget_args)
            if self.key(*nxt) not in set(keys.tolist()):
                return False
        return True

    def estimate(self, G: tuple[int, ...], res: int) -> int:
        """Admissible h of the module docstring."""
        return int(node_estimate(np.int64(self.key(G, res)), *self.args, *self.patterns, UNBOUNDED))

    def edges(self, G: tuple[int, ...], res: int) -> list[tuple[Node, int]]:
        """Every edge leaving (G, res): (next node, cost)."""
        keys, steps = edge_arrays(np.int64(self.key(G, res)), *self.args)
        return [(self.node(k), c) for k, c in zip(keys.tolist(), steps.tolist())]


@njit(cache=True)
def new_lists() -> tuple[List, List]:
    """Empty typed lists for the children's keys and edge costs. Typed containers are made, read
    and changed only inside compiled (cached) functions: their methods called from Python compile
    anew in every process."""
    return List.empty_list(types.int64), List.empty_list(types.int64)


@njit(cache=True)
def edge_arrays(key: int, bits: int, I: np.ndarray, O: np.ndarray, limits: np.ndarray, costs: EdgeCosts,
                rho: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The edges leaving the node ``key`` (:func:`children`) as arrays: (next nodes, costs)."""
    keys, steps = List.empty_list(types.int64), List.empty_list(types.int64)
    children(key, bits, I, O, limits, costs, rho, keys, steps)
    return as_array(keys), as_array(steps)


@njit(cache=True)
def as_array(values: List) -> np.ndarray:
    """A typed int64 list as an array."""
    out = np.empty(len(values), np.int64)
    for n in range(len(values)):
        out[n] = values[n]
    return out


@njit(cache=True)
def node_estimate(key: int, bits: int, I: np.ndarray, O: np.ndarray, limits: np.ndarray, costs: EdgeCosts,
                  rho: np.ndarray, pat: np.ndarray, table: np.ndarray, enough: int) -> int:
    """Admissible h of the module docstring at the node ``key`` (:meth:`Graph.key`), or, once a
    part of it reaches ``enough`` (a node pruned at that value), that part.

    ``limits`` = (M, least of C and R_max, R_max, prefill cap, token cap, 1 to drop dominated
    evictions else 0), ``costs`` the :class:`.tables.EdgeCosts`, ``rho[i, g]`` =
    :math:`\rho_i(g)`, ``pat`` and ``table`` the pattern tables (:attr:`Graph.patterns`).
    """
    N = I.shape[0]
    mask = (1 << bits) - 1
    res = key >> (bits * N)
    M, per_batch = limits[0], limits[1]
    r_max = area = left = entry = refills = 0
    waiting = False
    for i in range(N):
        g = (key >> (bits * i)) & mask
        r = O[i] - g
        if r == 0:
            continue
        r_max = max(r_max, r)
        left += r
        area += r * (I[i] + g) + r * (r - 1) // 2
        if not (res >> i) & 1:
            entry += I[i] + g
            waiting = True
            if g > 0:  # evicted: its next token is a refill (rho is monotone in g)
                refills += min(rho[i, g + 1], rho[i, O[i]])
    f0 = -(-entry // M) if waiting else 0
    b = max(r_max, f0, -(-left // per_batch), -(-area // M))
    counted = costs.base * b + costs.prefill_bias * f0 + costs.least_bias * (b - f0) + refills
    return counted if counted >= enough else max(counted, patterns_at(key, bits, O, rho, pat, table, enough))


@njit(cache=True)
def children(key: int, bits: int, I: np.ndarray, O: np.ndarray, limits: np.ndarray, costs: EdgeCosts,
             rho: np.ndarray, out_keys: List, out_costs: List) -> None:
    """Every edge leaving the node ``key`` into ``out_keys`` (next node) and ``out_costs`` (its cost),
    cleared first: a depth-first walk over the unfinished requests' choices (level t decides the
    t-th; choice 0 holds no KV after the batch: waits, or is evicted when resident; 1 generates a
    token: decodes when resident, else (re)fills; 2 idles holding its KV, residents only) that
    leaves a choice as soon as M, R_max or C is exceeded. With finite caps in ``limits`` (those of
    :attr:`Graph.budget_args`) only the edges whose (re)fills, prefilled whole, stay within the
    prefill cap, and whose prefill tokens plus decodes within the token cap. Edges that evict a
    resident able to idle (dominated, module docstring) are left out unless ``limits[5]`` is 0."""
    out_keys.clear()
    out_costs.clear()
    N = I.shape[0]
    mask = (1 << bits) - 1
    shift = bits * N
    res = key >> shift
    cap, per_batch, R_max, pre_cap, tok_cap, dominated = limits[0], limits[1], limits[2], limits[3], limits[4], limits[5]
    k_b, k_pb, k_db = costs.base, costs.prefill_bias, costs.decode_bias
    G = np.empty(N, np.int64)
    todo = np.empty(N, np.int64)
    T = 0
    for i in range(N):
        G[i] = (key >> (bits * i)) & mask
        if G[i] < O[i]:
            todo[T] = i
            T += 1
    # Level t holds the batch so far, before deciding todo[t]: KV held, requests holding KV,
    # tokens generated, a fill (0/1), refill extras, the decodes' rho sum (-1: no decode), next key.
    kv = np.zeros(T + 1, np.int64)
    held = np.zeros(T + 1, np.int64)
    gen = np.zeros(T + 1, np.int64)
    fill = np.zeros(T + 1, np.int64)
    refill = np.zeros(T + 1, np.int64)
    dec = np.full(T + 1, -1, np.int64)
    nxt = np.zeros(T + 1, np.int64)
    choice = np.full(T + 1, -1, np.int64)
    tok = np.zeros(T + 1, np.int64)  # prefill tokens (fills prefilled whole) plus decodes
    pre = np.zeros(T + 1, np.int64)  # prefill tokens
    nxt[0] = key & ((1 << shift) - 1)
    t = 0
    while t >= 0:
        if t == T:
            if gen[T] > 0 and not (dominated and idling_fits(T, todo, choice, res, I, G, kv[T], held[T], cap, R_max)):
                cost = k_b + k_pb * fill[T] + refill[T]
                if dec[T] >= 0:
                    cost += min(k_db, k_pb * (1 - fill[T]) + dec[T])
                out_keys.append(nxt[T])
                out_costs.append(cost)
            t -= 1
            continue
        choice[t] += 1
        c = choice[t]
        i = todo[t]
        resident = (res >> i) & 1
        if c > 1 + resident:
            t -= 1
            continue
        kept = I[i] + G[i]  # KV held after generating a token (G' = G + 1)
        kv[t + 1], held[t + 1], gen[t + 1] = kv[t], held[t], gen[t]
        fill[t + 1], refill[t + 1], dec[t + 1], nxt[t + 1] = fill[t], refill[t], dec[t], nxt[t]
        tok[t + 1], pre[t + 1] = tok[t], pre[t]
        if c == 1:
            if kv[t] + kept > cap or held[t] >= R_max or gen[t] >= per_batch:
                continue
            step = 1 if resident else kept  # tokens this request puts in the batch
            if tok[t] + step > tok_cap or (not resident and pre[t] + kept > pre_cap):
                continue
            after = G[i] + 1
            kv[t + 1] += kept
            tok[t + 1] += step
            held[t + 1] += 1
            gen[t + 1] += 1
            nxt[t + 1] += 1 << (bits * i)
            if after < O[i]:
                nxt[t + 1] |= 1 << (shift + i)
            if resident:
                dec[t + 1] = max(dec[t], 0) + rho[i, after]
            else:
                fill[t + 1] = 1
                pre[t + 1] += kept
                if G[i] > 0:
                    refill[t + 1] += rho[i, after]
        elif c == 2:
            if kv[t] + kept - 1 > cap or held[t] >= R_max:
                continue
            kv[t + 1] += kept - 1
            held[t + 1] += 1
            nxt[t + 1] |= 1 << (shift + i)
        t += 1
        choice[t] = -1


@njit(cache=True)
def idling_fits(T: int, todo: np.ndarray, choice: np.ndarray, res: int, I: np.ndarray, G: np.ndarray,
                kv: int, held: int, cap: int, R_max: int) -> bool:
    """Whether a resident the batch evicts (choice 0) could idle holding its KV instead, within M and
    R_max: then this edge's child is dominated by that sibling (same G and cost, one more resident)."""
    for t in range(T):
        i = todo[t]
        if choice[t] == 0 and (res >> i) & 1 and kv + I[i] + G[i] - 1 <= cap and held < R_max:
            return True
    return False
