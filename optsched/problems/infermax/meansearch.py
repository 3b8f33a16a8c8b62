r"""Exact mean latency and mean TTFT at small N: A* over iteration-level states, arrivals included.

The states, the batches (edges) the search lists and its estimate h are those of :mod:`.meanproblem`;
:mod:`.meanedges` lists a state's batches.

**Dominance.** Let :math:`V(s, t)` be the least sum of the events still to come from state s at
time t, and :math:`n(s)` their number. V is non-decreasing in t (a schedule from a later t, replayed
from an earlier one, has no later event) and :math:`V(s, t + \delta) \le V(s, t) + n(s) \delta`
(shift a schedule by :math:`\delta`; arrivals are only earlier relative to it). So a label
:math:`(t_1, A_1)` of s is at least as good as :math:`(t_2, A_2)` when :math:`A_1 + n(s)
\max(0, t_1 - t_2) \le A_2`, and the latter is dropped.

**A*.** Best first by f, the larger of :math:`A + h` and the parent label's f (pathmax: h is not
consistent, and every continuation of a label is one of its parent's, so by induction f is at most
every schedule through the label); a label whose f reaches the best schedule known (the incumbent,
value U) is not queued. A* takes labels from the queue in order of f; some label
on an optimal track (one whose best continuation reaches the optimum :math:`C^*`) is always queued
until the goal is taken, when :math:`C^* < U` (the argument of :mod:`.astar`: a dropped or dominated
label is replaced by one at least as good, which is on track too). So the first goal taken is
optimal, an empty queue proves :math:`U \le C^*`, and when the search stops early the least
f in the queue (at most U) is a proven bound; stopped while a label's successors are
queued, that label's f (the least when it was taken) stands for them.

**Floors.** h at t is at least :math:`\sum_i (\max(t, a_i) + c_i)` over the pending jobs (each
order-bound term is at least the matching one of these, sorted). A newly reached state whose A plus
this floor reaches U is pruned without its estimate. While a state's batches are listed part by
part, a partial batch is dropped when the events of its label can only reach U: its end is at
least :math:`\max(t, \text{its arrivals so far})` plus its cost so far (the cost model's terms are
non-negative); a request whose part brings its event adds that end (it arrived by the batch's
start), any other pending request at least :math:`\max(\text{end}, a_i) + c_i` after its part
(the least over its parts for those not chosen yet): every completion's A plus floor is no less.
After 64 listings, where these partial-batch checks have pruned under 1 % of the batches met, they
are made in one listing in 16 only (:meth:`.meanedges.EdgeLister.visit_edges`; skipping a check
prunes less, never wrongly).
A label of a state already estimated is pruned by :math:`A + n t` plus the estimate's part that
does not depend on t (:func:`.meanproblem.estimate_at`, *Order bound*) before h is computed at t.

**Estimates.** A new state's estimate is made in two stages: first its own part (the pending jobs'
order bounds, H2 and release bounds, :meth:`.meanproblem.SearchProblem.own_estimate`); the
batch-type relaxation and the first-token split (:meth:`.meanproblem.SearchProblem.refine`), which
only raise it, are added when a label of the state first passes the own part's f below U. Each part
is valid at every time the state is reached, so a label pruned by the own part is pruned by h.

**Dives.** Schedules fast, for the incumbent, by two descents: the greedy one from the label the
search takes, and a beam from the start. Each layer of a descent lists the batches of its labels
and keeps, of the next labels whose A + h is below the incumbent (h without the batch-type
relaxation of :mod:`.meantypes`, known for some states only), the ``width`` least, one per state
(the greedy descent: width 1); a goal reached below the incumbent becomes the incumbent at once (U
is its value, and the argument above holds for it), and the descent ends when a layer keeps
nothing. The first beam has width 2; each that ends by itself doubles the next one's width (up to
:data:`MAX_DIVE_WIDTH`), each dropped halves it. The search dives greedily before its first
expansion, and before an expansion whenever its dives so far have taken at most a fifth of its
time: a beam while the beams have taken at most a third of the dives' time, else greedily; a dive
is dropped once it has run a fifth of the budget. When the queue then holds nothing below U, the
incumbent is optimal.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from ...budget import TimeBudget
from ...collector import cyclic_collector_paused
from ...instance import Instance
from ...result import Status
from ...schedule import Batch, Schedule
from .meanedges import Edge, EdgeLister, Floor, Stopped
from .meanproblem import Estimate, SearchProblem, Sub, estimate_at
from .schedules import serial_completion

__all__ = ["MAX_LABELS", "MAX_STATES", "MEAN_SEARCH", "MEAN_SEARCH_DIVE", "MeanSearchResult", "mean_search"]

#: Labels the search keeps at most (about 700 bytes each with the queue and the parents: 1.4 GB).
MAX_LABELS = 2_000_000

#: States the search reaches at most, each kept with its estimate (0.9 to 1.8 kB: 1.8 GB at most).
MAX_STATES = 1_000_000

#: The ``solver`` of the search's schedules: its optimal goal's, and its best dive's.
MEAN_SEARCH, MEAN_SEARCH_DIVE = "mean-search", "mean-search-dive"

#: Expansions between two looks at the clock.
CLOCK_EVERY = 64

#: The share of the search's time its dives take at most, and the share of that the beams take at
#: most (module docstring, *Dives*): a dive starts while they have taken no more, and is dropped
#: once it has run :data:`DIVE_SHARE` of the budget.
DIVE_SHARE, BEAM_SHARE = 0.2, 1 / 3

#: The widest beam a dive keeps (module docstring, *Dives*).
MAX_DIVE_WIDTH = 256

#: Relative slack of the incumbent's pruning (float sums of the same batch times may differ in the
#: last bits between the search and the replay); the floors prune with it once more (they add h's
#: terms in other orders).
PRUNE_RTOL = 1e-12


@dataclass(frozen=True)
class MeanSearchResult:
    """What :func:`mean_search` found.

    Attributes
    ----------
    schedule
        Its best schedule (better than the incumbent), or None when it found none better: the
        optimal goal's (``solver`` :data:`MEAN_SEARCH`), or its best dive's (:data:`MEAN_SEARCH_DIVE`;
        with status ``optimal`` where nothing queued was below it).
    value
        That schedule's objective (the search's own sum), or None.
    bound
        A proven lower bound on the objective (mean seconds).
    status
        ``optimal`` (the bound meets the best of its schedule and the incumbent), ``time_limit``
        (stopped by the budget, :data:`MAX_LABELS` or :data:`MAX_STATES`), or ``infeasible`` (no incumbent and no
        schedule: without evictions every path can deadlock).
    expanded, labels
        Labels expanded and labels queued.
    dives
        Dives run, and how many of them lowered the incumbent.
    """

    schedule: Schedule | None
    value: float | None
    bound: float
    status: Status
    expanded: int
    labels: int
    dives: tuple[int, int] = (0, 0)


class _Search:
    """The A* of :func:`mean_search`: labels by state, the queue and the parents."""

    def __init__(
        self, pb: SearchProblem, upper: float | None, budget: TimeBudget, max_labels: int, max_states: int
    ) -> None:
        self.pb, self.upper, self.budget = pb, upper, budget
        self.max_labels, self.max_states = max_labels, max_states
        self.edges = EdgeLister(pb)
        #: The sum of the arrivals: the objective is (sum of event times - shift) / n.
        self.shift = math.fsum(r.arrival for r in pb.reqs)
        cut = math.inf if upper is None else upper * len(pb.reqs) + self.shift
        self.cut = cut - PRUNE_RTOL * abs(cut) if math.isfinite(cut) else math.inf
        #: Per state reached: its estimate parts (made when first reached, refined when first passed),
        #: its labels kept and whether the estimate is refined.
        self.seen: dict[tuple[Sub, ...], tuple[Estimate, list[int], bool]] = {}
        self.state: list[tuple[Sub, ...]] = []
        self.t: list[float] = []
        self.acc: list[float] = []
        self.parent: list[int] = []  # -1 for the start
        self.dead: list[bool] = []
        #: Per label queued, its A + h as queued (at least its parent's: pathmax); 0 for a dive's.
        self.f: list[float] = []
        self.heap: list[tuple[float, float, int]] = []
        self.expanded = 0
        self.full_goal = not pb.first_tokens_only
        #: The goal node of the best dive (below the incumbent), the dives run and those that lowered
        #: the incumbent.
        self.dived: int | None = None
        self.dive_counts = (0, 0)
        #: The search's start and the time its greedy dives and its beams took.
        self.started, self.dive_time, self.beam_time = time.perf_counter(), 0.0, 0.0
        #: The next beam's width (module docstring, *Dives*).
        self.dive_width = 2
        self.most = sum(r.prompt_tokens + r.output_tokens for r in pb.reqs)

    def mean(self, total: float) -> float:
        """The objective (mean seconds) of a sum ``total`` of event times."""
        return (total - self.shift) / len(self.pb.reqs)

    def over(self) -> bool:
        """Whether the budget has expired, or the labels kept or states reached pass their caps."""
        return self.budget.expired() or len(self.state) > self.max_labels or len(self.seen) > self.max_states

    def goal(self, state: tuple[Sub, ...]) -> bool:
        """All events done (and, for ttft where :attr:`SearchProblem.first_tokens_only` is false,
        every request finished)."""
        if self.full_goal:
            return all(sub[2] == r.output_tokens for sub, r in zip(state, self.pb.reqs))
        return all(sub[2] > 0 for sub in state)

    def floored(self, state: tuple[Sub, ...], t: float, acc: float) -> bool:
        """Whether the label (t, acc) of ``state`` reaches the incumbent with the own floor alone (h is
        at least :meth:`.SearchProblem.own_floor`, module docstring, *Floors*)."""
        return (acc + self.pb.own_floor(state, t)) * (1.0 - PRUNE_RTOL) >= self.cut

    def push(self, state: tuple[Sub, ...], t: float, acc: float, parent: int) -> None:
        """Queue the label (t, acc) of ``state`` unless pruned or dominated (module docstring)."""
        entry = self.seen.get(state)
        if entry is None:
            if self.floored(state, t, acc):
                return
            entry = self.seen[state] = (self.pb.own_estimate(state, t), [], False)
        est, kept, refined = entry
        while True:  # the own part of the estimate first, refined once a label passes it (Estimates)
            if acc + est.n * t + est.late >= self.cut:  # h at t is at least n t + late (Floors)
                return
            f = acc + estimate_at(est, t)
            if parent >= 0 and self.f[parent] > f:  # every continuation of the label is one of its parent's
                f = self.f[parent]
            if f >= self.cut:
                return
            if refined:
                break
            est, refined = self.pb.refine(state, t, est), True
            self.seen[state] = (est, kept, True)
        n, times, accs = est[0], self.t, self.acc
        for k in kept:
            if accs[k] + (n * (times[k] - t) if times[k] > t else 0.0) <= acc:
                return
        if kept:
            live = []
            for k in kept:
                if acc + (n * (t - times[k]) if t > times[k] else 0.0) <= accs[k]:
                    self.dead[k] = True
                else:
                    live.append(k)
            kept[:] = live
        node = self.add(state, t, acc, parent, f)
        kept.append(node)
        heapq.heappush(self.heap, (f, -acc, node))

    def add(self, state: tuple[Sub, ...], t: float, acc: float, parent: int, f: float = 0.0) -> int:
        """Keep the label (t, acc) of ``state`` reached from ``parent``, queued with ``f``; its node."""
        self.f.append(f)
        self.state.append(state)
        self.t.append(t)
        self.acc.append(acc)
        self.parent.append(parent)
        self.dead.append(False)
        return len(self.state) - 1

    def dive(self, node: int, beam: bool) -> None:
        """A dive (module docstring, *Dives*): the greedy descent from ``node``, or the ``beam`` from
        the start; at most one layer per token of the instance and :data:`DIVE_SHARE` of the budget,
        each goal reached below the incumbent becoming the incumbent. Raises :class:`Stopped` when
        the search's budget expires."""
        run, improved = self.dive_counts
        width = self.dive_width if beam else 1
        started, cap = time.perf_counter(), self.budget.part(DIVE_SHARE)
        incumbent, ended = self.dived, False
        types = self.pb.types
        if types is not None:
            types.solving = False  # a dive's estimates go without the batch-type relaxation
        try:
            layer = [0 if beam else node]  # node 0: the start's
            for _ in range(self.most):
                layer = self.descend(layer, width, lambda: self.over() or cap.expired())
                if not layer:
                    break
            ended = True
        except Stopped:
            if self.over():
                raise
        finally:
            if beam:
                self.beam_time += time.perf_counter() - started
            else:
                self.dive_time += time.perf_counter() - started
            if types is not None:
                types.solving = True
        if beam:
            self.dive_width = min(2 * width, MAX_DIVE_WIDTH) if ended else max(1, width // 2)
        self.dive_counts = (run + 1, improved + (self.dived != incumbent))

    def dive_due(self) -> bool | None:
        """The dive due before an expansion: none (None) once the dives so far have taken more than
        :data:`DIVE_SHARE` of the search's time, else a beam (True) while the beams have taken at
        most :data:`BEAM_SHARE` of the dives' time, else a greedy one (False)."""
        spent = self.dive_time + self.beam_time
        if spent > DIVE_SHARE * (time.perf_counter() - self.started):
            return None
        return self.beam_time <= BEAM_SHARE * spent and spent > 0.0

    def descend(self, layer: list[int], width: int, stop: Callable[[], bool]) -> list[int]:
        """A dive's next layer from the nodes ``layer``: of their batches' next labels whose A + h is
        below the incumbent, the ``width`` least (one per state, the least kept), as nodes;
        a goal below the incumbent becomes it (:attr:`dived`). Raises :class:`Stopped` once
        ``stop()`` is true."""
        pb = self.pb
        best: dict[tuple[Sub, ...], tuple[float, float, float, int]] = {}
        for node in layer:
            t, acc = self.t[node], self.acc[node]

            def visit(edge: Edge, node: int = node, t: float = t, acc: float = acc) -> None:
                cost, nxt, ready, events = edge
                end = (t if t >= ready else ready) + cost
                label = acc + end * events
                if self.goal(nxt):
                    if label < self.cut:
                        self.dived = self.add(nxt, end, label, node)
                        self.cut = label - PRUNE_RTOL * abs(label)
                    return
                if self.floored(nxt, end, label):
                    return
                est = pb.own_estimate(nxt, end)  # refined only where its own part passes (Estimates)
                f, kept = label + estimate_at(est, end), best.get(nxt)
                if f >= self.cut or (kept is not None and f >= kept[0]):
                    return
                f = label + estimate_at(pb.refine(nxt, end, est), end)
                if f < self.cut and (kept is None or f < kept[0]):
                    best[nxt] = (f, end, label, node)

            self.edges.visit_edges(self.state[node], stop, visit, self.floor(node))
        chosen = heapq.nsmallest(width, best.items(), key=lambda kv: kv[1][0])
        return [self.add(nxt, end, label, node) for nxt, (f, end, label, node) in chosen if f < self.cut]

    def schedule(self, node: int, solver: str) -> Schedule:
        """The schedule of the path to the goal ``node``, labelled ``solver`` (for ttft where
        :attr:`SearchProblem.first_tokens_only`, finished by the serial completion)."""
        schedule = Schedule(self.pb.instance.name, tuple(self.path(node)), {"solver": solver})
        if not self.full_goal:
            schedule = serial_completion(self.pb.instance, schedule, evict=self.pb.evict)
        return schedule

    def expand(self, node: int) -> None:
        """Queue every kept batch's label from ``node``."""
        self.expanded += 1
        t, acc, push = self.t[node], self.acc[node], self.push

        def visit(edge: Edge) -> None:
            cost, nxt, ready, events = edge
            end = (t if t >= ready else ready) + cost
            push(nxt, end, acc + end * events, node)

        self.edges.visit_edges(self.state[node], self.over, visit, self.floor(node))

    def floor(self, node: int) -> Floor | None:
        """The :class:`~.meanedges.Floor` of ``node``'s batches (module docstring, *Floors*), or None
        without an incumbent."""
        if not math.isfinite(self.cut):
            return None
        pb, state = self.pb, self.state[node]
        pending = [pb.is_pending(i, sub) for i, sub in enumerate(state)]
        limit = self.cut / (1.0 - PRUNE_RTOL) - self.acc[node]
        return Floor(self.t[node], limit, pending, pb.arrival, pb.part_floor)

    def path(self, node: int) -> list[Batch]:
        """The batches from the start to ``node`` (each edge's parts found again from its states and
        times), following which request stands at each position of the states (S2). Where E7 writes
        a request as finished at its first token with evictions allowed, its eviction is written into
        the next batch."""
        nodes = [node]
        while (prev := self.parent[nodes[-1]]) >= 0:
            nodes.append(prev)
        nodes.reverse()
        pb = self.pb
        ids = [r.id for r in pb.reqs]  # the request at each position of the state
        out: list[Batch] = []
        state, t = self.state, self.t
        held: tuple[str, ...] = ()  # E7: requests that hold KV after their first token, evicted next
        for prev, nxt in zip(nodes, nodes[1:]):
            batches, raw = self.edges.batches_of(state[prev], state[nxt], t[prev], t[nxt], ids)
            batches[0] = replace(batches[0], evict=held + batches[0].evict)
            out.extend(batches)
            if pb.first_tokens_only and pb.evict:
                firsts = zip(ids, state[prev], raw, pb.reqs)
                held = tuple(rid for rid, a, b, r in firsts if a[2] == 0 < b[2] and r.output_tokens > 1)
            ids = [ids[k] for k in pb.canonical_order(raw)]
        return out


def mean_search(
    instance: Instance,
    objective: str,
    upper: float | None,
    budget: TimeBudget,
    *,
    no_evict: bool = False,
    no_hybrid: bool = False,
    no_chunk: bool = False,
    max_labels: int = MAX_LABELS,
    max_states: int = MAX_STATES,
) -> MeanSearchResult:
    """The least mean latency (``objective='latency'``) or mean TTFT (``'ttft'``) of ``instance``
    by A* (module docstring), within ``budget``.

    Parameters
    ----------
    upper
        The objective of a schedule known (the incumbent; None: none): only better ones are looked for.
    budget
        The search stops once it expires, with the proven bound (status ``time_limit``).
    no_evict, no_hybrid, no_chunk
        The model's restrictions (fix C9).
    max_labels, max_states
        The search stops (status ``time_limit``) once it has queued this many labels, or reached
        this many states.
    """
    if objective not in ("latency", "ttft"):
        raise ValueError(f"mean_search: objective {objective!r} is not 'latency' or 'ttft'")
    pb = SearchProblem(instance, objective, not no_evict, not no_hybrid, not no_chunk)
    if pb.types is not None:
        pb.types.within(budget)
    with cyclic_collector_paused():  # the search is freed (by its counts) before the collector resumes
        try:
            return _run(_Search(pb, upper, budget, max_labels, max_states))
        finally:
            pb.clear_caches()


def _run(search: _Search) -> MeanSearchResult:
    """The A* loop of :func:`mean_search` from the start, with its dives."""
    search.push(tuple((0, r.prompt_tokens, 0) for r in search.pb.reqs), 0.0, 0.0, -1)
    stopped_at = None
    while search.heap:
        f, _, node = heapq.heappop(search.heap)
        if search.dead[node]:
            continue
        if f >= search.cut:  # queued before a dive lowered the incumbent: nothing left below it
            break
        if search.goal(search.state[node]):
            return _found(search, node)
        if search.expanded % CLOCK_EVERY == 0 and search.over():
            stopped_at = f
            break
        try:
            beam = search.dive_due()
            if beam is not None:
                search.dive(node, beam)
            search.expand(node)
        except Stopped:  # the node's f is at most every queued label's: still a bound
            stopped_at = f
            break
    if stopped_at is None:  # nothing below the incumbent: it is optimal (no schedule at all without one)
        if search.upper is None and search.dived is None:
            return _result(search, Status.INFEASIBLE, math.inf)
        return _result(search, Status.OPTIMAL, search.cut)
    return _result(search, Status.TIME_LIMIT, min(stopped_at, search.cut))


def _found(search: _Search, node: int) -> MeanSearchResult:
    """The result when the goal ``node`` is taken from the queue: its path, as a schedule, is optimal."""
    value = search.mean(search.acc[node])
    schedule = search.schedule(node, MEAN_SEARCH)
    return MeanSearchResult(
        schedule, value, value, Status.OPTIMAL, search.expanded, len(search.state), search.dive_counts
    )


def _result(search: _Search, status: Status, bound_sum: float) -> MeanSearchResult:
    """The result with the best dive's schedule (or none) and the bound from ``bound_sum``, a proven
    least sum of the event times."""
    node = search.dived
    schedule = None if node is None else search.schedule(node, MEAN_SEARCH_DIVE)
    value = None if node is None else search.mean(search.acc[node])
    return MeanSearchResult(
        schedule, value, search.mean(bound_sum), status, search.expanded, len(search.state), search.dive_counts
    )
