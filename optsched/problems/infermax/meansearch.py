r"""Exact mean latency and mean TTFT at small N: A* over iteration-level states, arrivals included.

**States.** Request i's state is :math:`(m_i, I_i, g_i)` (KV held, current prompt, tokens
generated), as in the contract; a node is the joint state with a label :math:`(t, A)`: t the end of
the last batch and A the sum of the *event times* so far (finish times for ``latency``, first-token
times for ``ttft``). The objective is :math:`(A_{final} - \sum_i a_i) / N`. An edge is one batch:
each unfinished request idles, processes a legal item (a prefill chunk of :math:`1..I-m` tokens, the
whole rest with ``no_chunk``, or one decode token), or is evicted (it holds KV; evictions allowed)
and then idles or refills (a chunk of its new prompt) in the same batch; the batch holds C, P, M and
:math:`R_{max}` after processing (finishing requests included) and starts at
:math:`\max(t, a_i)` over its requests. Written out, an eviction that a request refills in the same
batch becomes an eviction-only batch (cost 0) before it, as the contract requires. For ``ttft`` the
search ends when every request has its first token, and :func:`.schedules.serial_completion`
finishes the schedule (later batches change no first-token time).

**Edges left out** (none changes the optimum). (E1) A batch without items: costless evictions move
to the next batch with items. (E2) An idle eviction that the batch's limits do not need (the batch
holds M and :math:`R_{max}` with that request still resident): postponing the eviction to the
request's next batch (where it is then evicted and refills, or idles evicted) leaves every state
after that batch, and every time, unchanged, and repeating this ends in a schedule where every idle
eviction is needed. (E3) Waiting beyond the batch's earliest start only delays every later time.
(E4) A request mid-prefill (:math:`0 < m < I`) evicted and refilling :math:`c \ge m` tokens of its
prompt in the same batch: the same batch with the request instead continuing with :math:`c - m`
tokens (idling for :math:`c = m`) is legal (that chunk is at most c, and with ``no_chunk`` it is the
whole rest), has fewer (prefill) tokens and no more of any other count, holds the same KV after
processing, starts no later and leads to the same state; the cost model is non-decreasing in every
count, so the replacement ends no later (for c = m without other items it is no batch: the state
stays as it was, earlier).

**Canonical states** (S1). Where nothing reads a request's prompt field, it is written as the
request's own prompt: for a finished request, and for one decoding (:math:`m \ge I`, so
:math:`m \ge` its own prompt): its next item is a decode and an eviction sets its prompt to
:math:`m + 1`, whatever the field held; its job is the same too. States equal up to these fields
have the same continuations, so they are one state.

**Dominance.** Let :math:`V(s, t)` be the least sum of the events still to come from state s at
time t, and :math:`n(s)` their number. V is non-decreasing in t (a schedule from a later t, replayed
from an earlier one, has no later event) and :math:`V(s, t + \delta) \le V(s, t) + n(s) \delta`
(shift a schedule by :math:`\delta`; arrivals are only earlier relative to it). So a label
:math:`(t_1, A_1)` of s is at least as good as :math:`(t_2, A_2)` when :math:`A_1 + n(s)
\max(0, t_1 - t_2) \le A_2`, and the latter is dropped.

**Estimate** h (admissible: never above V). Per request with an event to come: its *job* is the
work up to that event (the rest of its prefill, then one step per token to O for latency). A job
needs at least :math:`s_i` batches (:math:`\lceil p / \min(C, P) \rceil` for p prefill tokens left,
one per token after the first; an eviction never saves a batch: a refill generates one token), its
own batches cost at least :math:`c_i` in all (the least over chunkings of each fill, a decode priced
as the cheaper of the decode step and a refill of its context; the cost model is non-decreasing in
every count, so a batch costs at least its one item alone), and the KV after processing summed over
its batches is at least :math:`w_i` (a step's KV after processing is at least its fill's end, or
m + 1 for a token at context m). Every batch costs at least :math:`\tau`, the cheapest one-item
batch. Then, with :math:`k_i` the batch (counted from t) of i's event:
:math:`F_i \ge \max(t, a_i) + c_i` (H1), and :math:`F_i \ge t + \tau (k_i - q_i) + c'_i` with
:math:`q_i` i's own batches and :math:`c'_i = \min(\mathrm{cost} - \tau\,\mathrm{steps}) + \tau s_i`
over its plans (reduced costs), so :math:`\sum_i F_i \ge n t + \sum_i c'_i + \tau (K - \sum_i s_i)`
(H2) for any K at most :math:`\sum_i k_i`. Two such K: at most :math:`\kappa = \min(R_{max}, C)`
items per batch and at most one per request, which is :math:`P|pmtn|\sum C_j` with unit steps, whose
optimum is non-preemptive SPT (McNaughton 1959): :math:`\sum_j s_{(j)} \lceil (n - j) / \kappa
\rceil` over the sorted :math:`s_{(0)} \le s_{(1)} \le \dots`; and the KV per batch is at most M, so
the j-th event in time waits for at least the j smallest areas :math:`w_i / M`, in whole batches:
:math:`\sum_j \lceil \sum_{l \le j} w_{(l)} / M \rceil`; likewise a batch holds at most one step
with more than M/2 KV after processing and two with more than M/3 (per job, its fewest such steps:
the j-th step from a fill's end holds at least its end less j min(C, P)).

**Order bound.** The j-th event in time, :math:`F_{(j)}`, comes after every batch that finishes j
jobs, which number at least :math:`B_j`, the largest of: the j-th smallest :math:`s_i`; the j
smallest :math:`s_i` over :math:`\kappa`; the j smallest areas over M; the j smallest counts of steps
above M/2, and above M/3 over 2; and the prefill batches :math:`P_j` = the larger of the j-th smallest
:math:`\lceil p_i / \min(C, P) \rceil` and the j smallest p over P. Each of them pays the base (and
one tile), a prefill bias (at least :math:`P_j` of them) or a decode bias, and the jobs' item terms
(per token, context, squares: at least the j smallest item costs): :math:`L_j`. Each term is its
least over j-sets, so :math:`F_{(j)} \ge t + L_j`; also :math:`F_{(j)} \ge` the j-th smallest
:math:`\max(t, a_i) + c_i`; and, for an arrival r, the jobs released at r or later do all their
work after r and at least j less the others of the first j events are theirs, so :math:`F_{(j)} \ge
r + L^{(r)}_{j - n + n_r}` over those :math:`n_r` jobs. h is the larger of H2 and the sum over j of
the largest of these bounds on :math:`F_{(j)}`.

**A*.** Best first by :math:`A + h`; a label whose :math:`A + h` reaches the best schedule known
(the incumbent, value U) is not queued. A* takes labels from the queue in order of A + h; some label
on an optimal track (one whose best continuation reaches the optimum :math:`C^*`) is always queued
until the goal is taken, when :math:`C^* < U` (the argument of :mod:`.astar`: a dropped or dominated
label is replaced by one at least as good, which is on track too). So the first goal taken is
optimal, an empty queue proves :math:`U \le C^*`, and when the search stops early the least
:math:`A + h` in the queue (at most U) is a proven bound; stopped while a label's successors are
queued, that label's :math:`A + h` (the least when it was taken) stands for them.

**Floors.** h at t is at least :math:`\sum_i (\max(t, a_i) + c_i)` over the pending jobs (each
order-bound term is at least the matching one of these, sorted). A newly reached state whose A plus
this floor reaches U is pruned without its estimate. While a state's batches are listed part by
part, a partial batch is dropped when the events of its label can only reach U: its end is at
least :math:`\max(t, \text{its arrivals so far})` plus its cost so far (the cost model's terms are
non-negative); a request whose part brings its event adds that end (it arrived by the batch's
start), any other pending request at least :math:`\max(\text{end}, a_i) + c_i` after its part
(the least over its parts for those not chosen yet): every completion's A plus floor is no less.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, replace
from functools import lru_cache
from itertools import accumulate
from typing import Any, NamedTuple

from ...budget import TimeBudget
from ...collector import cyclic_collector_paused
from ...costmodel import Coefficients
from ...instance import Instance
from ...result import Status
from ...schedule import Batch, Schedule
from .meanedges import Edge, EdgeLister, Floor, Part, Stopped
from .schedules import serial_completion

__all__ = ["MAX_LABELS", "MAX_STATES", "Action", "MeanSearchResult", "SearchProblem", "estimate_at", "mean_search"]

#: Labels the search keeps at most (about 700 bytes each with the queue and the parents: 1.4 GB).
MAX_LABELS = 2_000_000

#: States the search reaches at most, each kept with its estimate (0.9 to 1.8 kB: 1.8 GB at most).
MAX_STATES = 1_000_000

#: Expansions between two looks at the clock.
CLOCK_EVERY = 64

#: Relative slack of the incumbent's pruning (float sums of the same batch times may differ in the
#: last bits between the search and the replay); the floors prune with it once more (they add h's
#: terms in other orders).
PRUNE_RTOL = 1e-12

Sub = tuple[int, int, int]


class Job(NamedTuple):
    """A request's work up to its event (module docstring): least batches, prefill batches and
    prefill tokens; least own cost c, reduced cost c' (less tau s), item cost and KV area; its
    fewest steps holding more than M / 2 and more than M / 3 KV after processing."""

    steps: int
    pre_batches: int
    pre_tokens: int
    cost: float
    red: float
    item: float
    area: int
    half: int
    third: int


class Estimate(NamedTuple):
    """The parts of h that do not depend on t: events to come, H2 less n t, the order bounds L_j,
    the release bounds on the j-th event (and whether they may count once every job is released),
    each job's (arrival, c_i), the latest arrival among them and h less n t from then on."""

    n: int
    h2: float
    orders: list[float]
    released: tuple[float, ...]
    released_late: bool
    per: tuple[tuple[float, float], ...]
    last: float
    late: float


@dataclass(frozen=True)
class MeanSearchResult:
    """What :func:`mean_search` found.

    Attributes
    ----------
    schedule
        Its best schedule (better than the incumbent), or None when it found none better.
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
    """

    schedule: Schedule | None
    value: float | None
    bound: float
    status: Status
    expanded: int
    labels: int


@dataclass(frozen=True)
class Action:
    """One request's part of a batch: idle, evict (``evict``) and/or an item of ``tokens``."""

    evict: bool
    tokens: int
    decode: bool
    new: Sub
    kv: int  # KV held after processing (finishing included): its share of M
    event: bool
    cached: int  # KV before the item (decode context, or the chunk's cached prefix)
    arrival: float = 0.0  # the request's arrival when it takes part (an item or an eviction), else 0


class SearchProblem:
    """The instance's data the search reads, with per-request caches."""

    def __init__(self, instance: Instance, objective: str, evict: bool, hybrid: bool, chunk: bool) -> None:
        lim = instance.limits
        self.instance, self.objective = instance, objective
        self.evict, self.hybrid, self.chunk = evict, hybrid, chunk
        self.reqs = instance.requests
        self.C, self.P = lim.token_budget, lim.prefill_budget
        self.M, self.R = lim.kv_capacity, lim.max_running
        self.step = min(self.C, self.P)
        self.cost = instance.cost_model
        self.coef = Coefficients.of(self.cost).folded()
        self.tau = min(self.cost.batch_time(1, 1, 1, 0, 0), self.cost.batch_time(1, 0, 0, 1, 1, 0, 1))
        self.kappa = min(self.C, self.R) if self.R is not None else self.C
        #: Per-batch limits on the jobs' counts (module docstring): KV area, steps above M/2 and M/3.
        self._per_batch = ((6, self.M), (7, 1), (8, 2)) if self.M is not None else ()  # Job fields area, half, third
        self.arrival = [r.arrival for r in self.reqs]
        self.actions = lru_cache(maxsize=None)(self.legal_actions)
        self.job = lru_cache(maxsize=None)(self._job)
        self.fill = lru_cache(maxsize=None)(self._fill)
        self.of_jobs = lru_cache(maxsize=None)(self._of_jobs)

    def clear_caches(self) -> None:
        """Empty the per-request caches. Each holds a bound method of this object, a cycle that only
        the cyclic collector frees, with everything cached in it."""
        for cache in (self.actions, self.job, self.fill, self.of_jobs):
            cache.cache_clear()

    def legal_actions(self, i: int, sub: Sub) -> tuple[Action, ...]:
        """Request i's legal parts of a batch from ``sub`` (module docstring)."""
        m, prompt, g = sub
        out_tokens = self.reqs[i].output_tokens
        if g == out_tokens:
            return (Action(False, 0, False, sub, 0, False, 0),)
        acts = [Action(False, 0, False, sub, m, False, 0)]
        starts = [(False, m, prompt)]
        if self.evict and m > 0:
            acts.append(Action(True, 0, False, (0, m + 1 if m >= prompt else prompt, g), 0, False, 0))
            starts.append((True, 0, m + 1 if m >= prompt else prompt))
        for ev, m0, p0 in starts:
            if m0 >= p0:  # decode
                done = g + 1 == out_tokens
                new = (0 if done else m0 + 1, p0, g + 1)
                acts.append(Action(ev, 1, True, new, m0 + 1, self._event(g, g + 1, out_tokens), m0))
                continue
            sizes = range(1, min(p0 - m0, self.step) + 1) if self.chunk else [p0 - m0]
            for c in sizes:
                if c > self.step or (ev and m < prompt and c >= m):  # E4
                    continue
                g2 = g + (m0 + c == p0)
                done = g2 == out_tokens
                new = (0 if done else m0 + c, p0, g2)
                acts.append(Action(ev, c, False, new, m0 + c, self._event(g, g2, out_tokens), m0))
        arrival, first = self.reqs[i].arrival, self.reqs[i].prompt_tokens
        return tuple(
            replace(a, arrival=arrival if a.tokens or a.evict else 0.0, new=self._canonical(a.new, first, out_tokens))
            for a in acts
        )

    @staticmethod
    def _canonical(sub: Sub, first: int, out_tokens: int) -> Sub:
        """``sub`` with its prompt written as the request's own (``first``) where nothing reads it (S1):
        a finished request, and a decoding one (it holds KV m >= its prompt, so it decodes next and an
        eviction makes its prompt m + 1, whatever the prompt was; m >= ``first`` there)."""
        m, prompt, g = sub
        if g == out_tokens:
            return (0, first, g)
        return (m, first, g) if m >= prompt else sub

    def _event(self, g: int, g2: int, out_tokens: int) -> bool:
        if self.objective == "ttft":
            return g == 0 and g2 > 0
        return g < out_tokens == g2

    def _fill(self, tokens: int, cached: int) -> Job:
        """Prefilling ``tokens`` over ``cached`` in chunks of at most min(C, P): its fewest batches and
        prefill tokens, and over its chunkings the least cost, reduced cost, item cost and KV area."""
        steps = -(-tokens // self.step) if tokens > 0 else 0
        if tokens <= 0:
            return Job(0, 0, 0, 0.0, 0.0, 0.0, 0, 0, 0)
        k = self.coef
        cost = red = item = math.inf
        for c in range(1, min(tokens, self.step) + 1) if self.chunk else [tokens]:
            if c > self.step:
                continue
            step = self.cost.batch_time(c, c, c * c, 0, 0, c * cached)
            own = (
                (k.per_token + k.prefill_per_token) * c
                + k.prefill_per_token_sq * c * c
                + k.prefill_per_ctx * c * cached
            )
            rest = self.fill(tokens - c, cached + c)
            cost, red, item = (
                min(cost, step + rest.cost),
                min(red, step - self.tau + rest.red),
                min(item, own + rest.item),
            )
        end = cached + tokens
        kvs = [max(end - j * self.step, 1) for j in range(steps)]  # the j-th step from the end holds >= this
        return Job(steps, steps, tokens, cost, red, item, sum(kvs), *self._large(kvs))

    def _large(self, kvs: list[int]) -> tuple[int, int]:
        """How many of the steps holding ``kvs`` hold more than M / 2, and more than M / 3."""
        if self.M is None:
            return 0, 0
        return sum(2 * w > self.M for w in kvs), sum(3 * w > self.M for w in kvs)

    def _job(self, i: int, sub: Sub) -> Job:
        """Request i's job from ``sub`` (module docstring): its least batches, prefill batches and
        prefill tokens, own cost c, reduced cost c' (without the last term tau s), item cost and KV area."""
        m, prompt, g = sub
        out_tokens, k = self.reqs[i].output_tokens, self.coef
        job = Job(0, 0, 0, 0.0, 0.0, 0.0, 0, 0, 0)
        if m < prompt:  # a (re)fill: continued, or restarted after an eviction
            go_on, restart = self.fill(prompt - m, m), self.fill(prompt, 0)
            cheap = (min(go_on.cost, restart.cost), min(go_on.red, restart.red), min(go_on.item, restart.item))
            job = go_on._replace(cost=cheap[0], red=cheap[1], item=cheap[2], area=min(go_on.area, restart.area))
            g, m = g + 1, prompt
        if self.objective == "ttft":
            return job
        steps, cost, red, item = job.steps, job.cost, job.red, job.item
        kvs = list(range(m + 1, m + out_tokens - g + 1))
        for ctx in range(m, m + out_tokens - g):  # one token at each context: a decode or a refill
            dec = self.cost.batch_time(1, 0, 0, 1, ctx, 0, ctx)
            dec_item = k.per_token + k.decode_per_token + k.decode_per_kv * ctx
            refill = self.fill(ctx + 1, 0)
            steps += 1
            cost += min(dec, refill.cost)
            red += min(dec - self.tau, refill.red)
            item += min(dec_item, refill.item)
        half, third = self._large(kvs)
        rest = (job.area + sum(kvs), job.half + half, job.third + third)
        return Job(steps, job.pre_batches, job.pre_tokens, cost, red, item, *rest)

    def is_pending(self, i: int, sub: Sub) -> bool:
        """Whether request i's event (its finish, or its first token for ``ttft``) is still to come."""
        return sub[2] == 0 if self.objective == "ttft" else sub[2] < self.reqs[i].output_tokens

    def own_floor(self, state: tuple[Sub, ...], t: float) -> float:
        """The sum over the pending jobs of max(t, a_i) + c_i: at most h at ``t`` (the order bound's
        terms are each at least one of these, in sorted order), from the cached jobs alone."""
        arrival, job, pending = self.arrival, self.job, self.is_pending
        return sum(
            (arrival[i] if arrival[i] > t else t) + job(i, sub).cost for i, sub in enumerate(state) if pending(i, sub)
        )

    def part_floor(self, i: int, part: Part) -> float:
        """For a pending request: 0 when ``part`` brings its event, else its job's own cost after it."""
        return 0.0 if part.event else self.job(i, part.new).cost

    def estimate(self, state: tuple[Sub, ...], t: float = 0.0) -> Estimate:
        """The parts of h that do not depend on t (module docstring): n, H2 less n t, the order
        bounds L_j of the j-th event less t, the release bounds of the arrivals after ``t`` (a valid
        part at every t), and each job's (arrival, c_i)."""
        arrival, job, is_pending = self.arrival, self.job, self.is_pending
        pending = [(arrival[i], job(i, sub)) for i, sub in enumerate(state) if is_pending(i, sub)]
        n = len(pending)
        if not n:
            return Estimate(0, 0.0, [], (), False, (), 0.0, 0.0)
        h2, orders, late = self.of_jobs(tuple(sorted(j for _, j in pending)))
        released = [0.0] * n
        for r in sorted({a for a, _ in pending if a > t}):  # the jobs released at r or later
            later = self.of_jobs(tuple(sorted(j for a, j in pending if a >= r)))[1]
            for j, low in enumerate(later, start=n - len(later)):
                released[j] = max(released[j], r + low)
        per = tuple((a, j.cost) for a, j in pending)
        last = max(a for a, _ in per)
        counts_late = any(rel > last + low for rel, low in zip(released, late))
        return Estimate(n, h2, orders, tuple(released), counts_late, per, last, max(h2, sum(late)))

    def _of_jobs(self, jobs: tuple[Job, ...]) -> tuple[float, list[float], list[float]]:
        """The parts of the estimate that depend only on the pending jobs (sorted: a multiset): H2
        less n t, the order bounds L_j, and the larger of L_j and the j-th smallest c_i."""
        n = len(jobs)
        cols = [sorted(col) for col in zip(*jobs)]  # each field of Job, sorted
        steps = cols[0]
        spt = sum(s * -(-(n - j) // self.kappa) for j, s in enumerate(steps))
        k = max(spt, sum(steps), *(_prefix_batches(cols[f], per) for f, per in self._per_batch))
        orders = self._orders(cols)
        return sum(cols[4]) + self.tau * k, orders, [max(low, c) for low, c in zip(orders, cols[3])]

    def _orders(self, cols: list[list[Any]]) -> list[float]:
        """L_j: the least cost of batches that finish any j of the jobs whose fields, each sorted,
        are ``cols`` (module docstring)."""
        k = self.coef
        per_batch = k.base + k.per_tile
        steps, pres = cols[0], cols[1]
        tokens, items, step_sums = accumulate(cols[2]), accumulate(cols[5]), accumulate(steps)
        sums = [(list(accumulate(cols[f])), per) for f, per in self._per_batch]
        out = []
        for j, (tok, item, step_sum) in enumerate(zip(tokens, items, step_sums)):
            pre = max(pres[j], -(-tok // self.P))
            b = max(steps[j], -(-step_sum // self.kappa), pre, *(-(-v[j] // per) for v, per in sums))
            bias = (
                k.prefill_bias * pre + k.decode_bias * (b - pre)
                if k.prefill_bias >= k.decode_bias
                else k.prefill_bias * b
            )
            out.append(per_batch * b + bias + item)
        return out


def _prefix_batches(values: list[int], per: int) -> int:
    """The sum over j of ceil(the sum of the j smallest ``values`` / ``per``): the least sum over
    the events of the batches before each, when a batch takes at most ``per`` of a quantity of which
    each job needs its value."""
    return sum(-(-prefix // per) for prefix in accumulate(values))


def estimate_at(est: Estimate, t: float) -> float:
    """h at time t from :meth:`SearchProblem.estimate`'s parts: the larger of H2 and the order bound."""
    if t >= est.last and not est.released_late:  # every job released: max(t, a) + c = t + c
        return est.n * t + est.late
    lows = sorted(max(t, a) + c for a, c in est.per)
    order = sum(max(t + low, x, rel) for low, x, rel in zip(est.orders, lows, est.released))
    return max(est.n * t + est.h2, order)


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
        #: Per state reached: its estimate parts (made when first reached) and its labels kept.
        self.seen: dict[tuple[Sub, ...], tuple[Estimate, list[int]]] = {}
        self.state: list[tuple[Sub, ...]] = []
        self.t: list[float] = []
        self.acc: list[float] = []
        self.parent: list[int] = []  # -1 for the start
        self.dead: list[bool] = []
        self.heap: list[tuple[float, float, int]] = []
        self.expanded = 0
        self.full_goal = pb.objective != "ttft" or not pb.evict

    def over(self) -> bool:
        """Whether the budget has expired, or the labels kept or states reached pass their caps."""
        return self.budget.expired() or len(self.state) > self.max_labels or len(self.seen) > self.max_states

    def goal(self, state: tuple[Sub, ...]) -> bool:
        """All events done (and, for ttft without evictions, every request finished)."""
        if self.full_goal:
            return all(sub[2] == r.output_tokens for sub, r in zip(state, self.pb.reqs))
        return all(sub[2] > 0 for sub in state)

    def push(self, state: tuple[Sub, ...], t: float, acc: float, parent: int) -> None:
        """Queue the label (t, acc) of ``state`` unless pruned or dominated (module docstring)."""
        entry = self.seen.get(state)
        if entry is None:
            if (acc + self.pb.own_floor(state, t)) * (1.0 - PRUNE_RTOL) >= self.cut:  # h is at least the floor
                return
            entry = self.seen[state] = (self.pb.estimate(state, t), [])
        est, kept = entry
        f = acc + estimate_at(est, t)
        if f >= self.cut:
            return
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
        node = len(self.state)
        kept.append(node)
        self.state.append(state)
        times.append(t)
        accs.append(acc)
        self.parent.append(parent)
        self.dead.append(False)
        heapq.heappush(self.heap, (f, -acc, node))

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
        """The batches from the start to ``node`` (each edge's parts found again from its states and times)."""
        out: list[list[Batch]] = []
        while (prev := self.parent[node]) >= 0:
            out.append(self.edges.batches_of(self.state[prev], self.state[node], self.t[prev], self.t[node]))
            node = prev
        return [b for part in reversed(out) for b in part]


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
    with cyclic_collector_paused():  # the search is freed (by its counts) before the collector resumes
        try:
            return _run(_Search(pb, upper, budget, max_labels, max_states))
        finally:
            pb.clear_caches()


def _run(search: _Search) -> MeanSearchResult:
    """The A* loop of :func:`mean_search` from the start."""
    pb = search.pb
    n, shift = len(pb.reqs), search.shift
    search.push(tuple((0, r.prompt_tokens, 0) for r in pb.reqs), 0.0, 0.0, -1)
    stopped_at = None
    while search.heap:
        f, _, node = heapq.heappop(search.heap)
        if search.dead[node]:
            continue
        if search.goal(search.state[node]):
            return _found(search, node, (search.acc[node] - shift) / n)
        if search.expanded % CLOCK_EVERY == 0 and search.over():
            stopped_at = f
            break
        try:
            search.expand(node)
        except Stopped:  # the node's f is at most every queued label's: still a bound
            stopped_at = f
            break
    if stopped_at is None:  # nothing below the incumbent: it is optimal (no schedule at all without one)
        if search.upper is None:
            return MeanSearchResult(None, None, math.inf, Status.INFEASIBLE, search.expanded, len(search.state))
        bound = (search.cut - shift) / n
        return MeanSearchResult(None, None, bound, Status.OPTIMAL, search.expanded, len(search.state))
    bound = (min(stopped_at, search.cut) - shift) / n
    return MeanSearchResult(None, None, bound, Status.TIME_LIMIT, search.expanded, len(search.state))


def _found(search: _Search, node: int, value: float) -> MeanSearchResult:
    """The result when the goal ``node`` is taken from the queue: its path, as a schedule, is optimal."""
    pb = search.pb
    schedule = Schedule(pb.instance.name, tuple(search.path(node)), {"solver": "mean-search"})
    if not search.full_goal:
        schedule = serial_completion(pb.instance, schedule)
    return MeanSearchResult(schedule, value, value, Status.OPTIMAL, search.expanded, len(search.state))
