r"""The search problem of the exact mean search (:mod:`.meansearch`): states, the legal parts of a
batch and the admissible estimate h.

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
search ends when every request has its first token (where E5 applies; otherwise, without
evictions under a KV or running limit, when every request has finished), and
:func:`.schedules.serial_completion` finishes the schedule (later batches change no first-token
time).

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
(E5) For ``ttft`` with evictions allowed, or without a KV capacity and a running limit, a request
that has its first token does nothing but idle or (evictions allowed) be evicted idle, after which
it is written as finished (it holds nothing and its event is done). In any schedule, delete
every item of a request after the batch of its first token, and where it was evicted or finished
after that, evict it idle there instead (without evictions and without limits it keeps its KV to
the end). Its KV after processing stays at its first-token value, at most what it held until its
eviction or finish (KV only grows until then), so every batch holds M and :math:`R_{max}`, and C
and P with fewer tokens; the cost model is non-decreasing in every count, so no batch ends later
and no first token comes later. Without evictions under a limit this fails: a request's last
decodes free its KV for the others. (E6) For ``ttft`` without a KV capacity and a running limit, no
eviction at all: in a schedule of E5's form, delete every eviction, and every item of a request
before its last eviction (which comes before its first token, so the prompt it refills is its own
I). Its refill then starts from an empty KV, the same chunks in the same batches; the other
batches lose items (and are dropped when empty); nothing limits the KV or the running requests, so
the schedule is legal and no batch ends later. (E7) Where E5 applies, a request is written as
finished from the batch of its first token on (its KV after processing counts in that batch
alone). With evictions allowed, in a schedule of E5's form, move its idle eviction to the next
batch (adding one where it is never evicted): every later batch holds no more KV and no more
running requests, and no time changes; the path written out holds that eviction. Without
evictions (and without limits, by E5) nothing counts the KV it keeps.

**Canonical states** (S1). Where nothing reads a request's prompt field, it is written as the
request's own prompt: for a finished request, and for one decoding (:math:`m \ge I`, so
:math:`m \ge` its own prompt): its next item is a decode and an eviction sets its prompt to
:math:`m + 1`, whatever the field held; its job is the same too. States equal up to these fields
have the same continuations, so they are one state. (S2) Requests alike (the same arrival, prompt
and output lengths) are interchangeable: swapping two of them in a schedule gives a schedule with
the same event times. Their subs are written in sorted order, so states equal up to such swaps are
one; a path written out follows which request stands at each position.

**Estimate** h (admissible: never above :math:`V(s, t)`, the least sum of the events still to come
from state s at time t). Per request with an event to come: its *job* is the
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
r + L^{(r)}_{j - n + n_r}` over those :math:`n_r` jobs; and the j-th event comes at r or later,
or else the first j events are all of jobs released before r, so :math:`F_{(j)} \ge \min(r, t +
L^{(<r)}_j)` with :math:`L^{(<r)}` the order bounds of those jobs alone. h is the larger of H2
and the sum over j of the largest of these bounds on :math:`F_{(j)}`. The j-th smallest
:math:`\max(t, a_i) + c_i` is at least t plus the j-th smallest :math:`c_i`, so at every t, h is at
least n t plus the larger of H2 less n t and :math:`\sum_j \max(L_j, c_{(j)})` (the estimate's
``late`` part): equal to h once every job is released and no release bound counts, a floor before
then that needs no sorting.

**First tokens and the rest** (latency). A request before its first token has it at some
:math:`FT_i`; its later tokens come one per batch after that batch, each batch at least its lone
cost, so :math:`F_i \ge FT_i + \rho_i` with :math:`\rho_i` its latency job's own cost less its ttft
job's (the least cost of those tokens alone, a decode or a refill each). Every schedule from s at t
is one of the ttft problem's from s at t, so the first tokens to come add up to at least that
problem's h at t (the same estimate over the requests before their first token); a request past
its first token arrived before t, so :math:`F_i \ge t + c_i`. h for latency is also at least the
sum of that h, the :math:`\rho_i` and these :math:`t + c_i`. Where a prompt budget spreads the
prompts over many batches, this charges every later first token those batches, which the order
bound's j-th event, counting only the j smallest prompts' batches against the j smallest jobs',
misses. Its part that does not depend on t is the ttft estimate's plus the rests and own costs,
so the floor above holds for it too.

**Batch types** (latency). :math:`\sum_i (F_i - t) \ge V_R(s) + \sum_i \iota_i`, the batch-type
relaxation's bound (:mod:`.meantypes`; :math:`\iota_i` the job's item cost), at every t: H2 less
n t is raised to it where the relaxation answers, so the floor above holds for it too. With
requests still to arrive: every request that has been in a batch arrived before it, so s is
reached only at times :math:`t \ge t_s`, the latest arrival of those requests (0 at the start), and
:math:`\sum_i F_i \ge t_s n + V_A(s, t_s)` (:mod:`.meantypes`, *Arrivals*: R from ``t_s`` with
the arrivals after it kept) at every such t; h is at least it (the estimate's ``floor``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from itertools import accumulate
from typing import Any, NamedTuple

from ...costmodel import Coefficients
from ...instance import Instance
from .meanedges import Part, Sampling
from .meantypes import TypeRelaxation

__all__ = [
    "SPLIT_PAYS",
    "SPLIT_SAMPLE",
    "SPLIT_TRIAL",
    "Action",
    "Estimate",
    "Job",
    "SearchProblem",
    "Sub",
    "estimate_at",
]

Sub = tuple[int, int, int]

#: New states whose latency estimate always has the first-token split (:class:`.meanedges.Sampling`).
SPLIT_TRIAL = 256
#: The least share of those estimates whose h the split must raise (at the time of the estimate) to
#: be made in every new state after the first :data:`SPLIT_TRIAL`.
SPLIT_PAYS = 0.01
#: Otherwise it is made in every this-many-th new state, so that the share stays measured.
SPLIT_SAMPLE = 16


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
    each job's (arrival, c_i), the latest arrival among them and h less n t from then on, for each
    arrival r after the time of the estimate the order bounds of the jobs released before r; for
    latency, the first-token split (module docstring, *First tokens and the rest*): the ttft
    estimate of the requests before their first token (None where there are none), the number of
    pending requests past it, and the sum of the rests and of those requests' own costs; for latency
    with requests still to arrive, a floor under h at every time the state is reached (module
    docstring, *Batch types*)."""

    n: int
    h2: float
    orders: list[float]
    released: tuple[float, ...]
    released_late: bool
    per: tuple[tuple[float, float], ...]
    last: float
    late: float
    before: tuple[tuple[float, list[float]], ...] = ()
    first: Estimate | None = None
    after: int = 0
    rest: float = 0.0
    floor: float = 0.0


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
        self.hybrid, self.chunk = hybrid, chunk
        self.reqs = instance.requests
        self.C, self.P = lim.token_budget, lim.prefill_budget
        self.M, self.R = lim.kv_capacity, lim.max_running
        unlimited = lim.unbounded_residency
        #: E6: for ttft without a KV capacity or a running limit, the optimum needs no eviction.
        self.evict = evict and not (objective == "ttft" and unlimited)
        #: E5 and E7: for ttft, a request is written as finished at its first token.
        self.first_tokens_only = objective == "ttft" and (self.evict or unlimited)
        self.step = min(self.C, self.P)
        self.cost = instance.cost_model
        self.coef = Coefficients.of(self.cost).folded()
        self.tau = min(self.cost.batch_time(1, 1, 1, 0, 0), self.cost.batch_time(1, 0, 0, 1, 1, 0, 1))
        self.kappa = min(self.C, self.R) if self.R is not None else self.C
        #: Per-batch limits on the jobs' counts (module docstring): KV area, steps above M/2 and M/3.
        self._per_batch = ((6, self.M), (7, 1), (8, 2)) if self.M is not None else ()  # Job fields area, half, third
        self.arrival = [r.arrival for r in self.reqs]
        #: Each request's tokens out at its event: it is pending while it has fewer (:meth:`is_pending`).
        self.event_at = [1 if objective == "ttft" else r.output_tokens for r in self.reqs]
        #: Each request's sub before its first batch.
        self.start = tuple((0, r.prompt_tokens, 0) for r in self.reqs)
        alike: dict[tuple[float, int, int], list[int]] = {}
        for i, r in enumerate(self.reqs):
            alike.setdefault((r.arrival, r.prompt_tokens, r.output_tokens), []).append(i)
        #: S2: the positions of each class of two or more requests alike, and each position's class.
        self.classes = tuple(tuple(members) for members in alike.values() if len(members) > 1)
        self.class_of = [tuple(alike[r.arrival, r.prompt_tokens, r.output_tokens]) for r in self.reqs]
        self.actions = lru_cache(maxsize=None)(self.legal_actions)
        self.job = lru_cache(maxsize=None)(self._job)
        self.fill = lru_cache(maxsize=None)(self._fill)
        self.of_jobs = lru_cache(maxsize=None)(self._of_jobs)
        #: For latency, the same instance's ttft problem, whose estimate bounds the first tokens to come.
        self.first = SearchProblem(instance, "ttft", evict, hybrid, chunk) if objective == "latency" else None
        #: The ttft estimates made, by the subs before their first token (the others None): made at
        #: the first time such a state is reached, each is valid at every time.
        self.first_estimates: dict[tuple[Sub | None, ...], Estimate] = {}
        #: Whether a new state's estimate gets the split (it costs about a third of a new state's time).
        self.splits = Sampling(SPLIT_TRIAL, SPLIT_PAYS, SPLIT_SAMPLE)
        #: Latency: the batch-type relaxation (:mod:`.meantypes`), its values kept between states.
        self.types = TypeRelaxation(self.coef, self.step, self.evict, hybrid) if objective == "latency" else None

    def clear_caches(self) -> None:
        """Empty the per-request caches (the ttft problem's too). Each holds a bound method of this
        object, a cycle that only the cyclic collector frees, with everything cached in it."""
        for cache in (self.actions, self.job, self.fill, self.of_jobs):
            cache.cache_clear()
        if self.types is not None:
            self.types.clear()
        if self.first is not None:
            self.first.clear_caches()
        self.first_estimates.clear()

    def canonical_order(self, state: tuple[Sub, ...]) -> list[int]:
        """S2: the positions of ``state`` in the order of its canonical form (each class of requests
        alike by their subs): the canonical state's k-th sub is ``state[order[k]]``."""
        order = list(range(len(state)))
        for members in self.classes:
            for k, pos in zip(members, sorted(members, key=state.__getitem__)):
                order[k] = pos
        return order

    def canonical(self, state: tuple[Sub, ...]) -> tuple[Sub, ...]:
        """S2: ``state`` with the subs of each class of requests alike in sorted order."""
        if not self.classes:
            return state
        return tuple(state[k] for k in self.canonical_order(state))

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
                done = g2 == out_tokens or (self.first_tokens_only and g2 > 0)  # E7: as finished
                new = (0, p0, out_tokens) if done else (m0 + c, p0, g2)
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
        return sub[2] < self.event_at[i]

    def own_floor(self, state: tuple[Sub, ...], t: float) -> float:
        """The sum over the pending jobs of max(t, a_i) + c_i: at most h at ``t`` (the order bound's
        terms are each at least one of these, in sorted order), from the cached jobs alone."""
        job, total = self.job, 0.0
        for i, (sub, a, at) in enumerate(zip(state, self.arrival, self.event_at)):
            if sub[2] < at:
                total += (a if a > t else t) + job(i, sub).cost
        return total

    def part_floor(self, i: int, part: Part) -> float:
        """For a pending request: 0 when ``part`` brings its event, else its job's own cost after it."""
        return 0.0 if part.event else self.job(i, part.new).cost

    def estimate(self, state: tuple[Sub, ...], t: float = 0.0) -> Estimate:
        """The parts of h that do not depend on t (module docstring): n, H2 less n t, the order
        bounds L_j of the j-th event less t, the release bounds of the arrivals after ``t`` (a valid
        part at every t), and each job's (arrival, c_i); for latency, with the first-token split
        where :attr:`splits` makes it (made less often where it rarely raises h: leaving it out
        lowers h, never above V)."""
        return self.refine(state, t, self.own_estimate(state, t))

    def refine(self, state: tuple[Sub, ...], t: float, est: Estimate) -> Estimate:
        """:meth:`estimate` from its part :meth:`own_estimate` ``est`` (made at any time the state
        is reached: each part is valid at every time): the batch-type relaxation's bounds and the
        first-token split added."""
        est = self._types(state, t, est)
        if self.first is None or not self.splits.due():
            return est
        split = self._split(state, t, est)
        self.splits.met += 1
        self.splits.paid += split.first is not None and _split_at(split, t) > estimate_at(est, t)
        return split

    def own_estimate(self, state: tuple[Sub, ...], t: float) -> Estimate:
        """The part of :meth:`estimate` from the pending jobs' own costs alone (the order bounds, H2
        and the release bounds): at most the whole, and cheaper to make."""
        arrival, job, is_pending = self.arrival, self.job, self.is_pending
        pending = [(arrival[i], job(i, sub)) for i, sub in enumerate(state) if is_pending(i, sub)]
        n = len(pending)
        if not n:
            return Estimate(0, 0.0, [], (), False, (), 0.0, 0.0)
        h2, orders, late = self.of_jobs(tuple(sorted(j for _, j in pending)))
        released = [0.0] * n
        before = []
        for r in sorted({a for a, _ in pending if a > t}):  # the jobs released at r or later, and before
            later = self.of_jobs(tuple(sorted(j for a, j in pending if a >= r)))[1]
            for j, low in enumerate(later, start=n - len(later)):
                released[j] = max(released[j], r + low)
            if len(later) < n:
                before.append((r, self.of_jobs(tuple(sorted(j for a, j in pending if a < r)))[1]))
        per = tuple((a, j.cost) for a, j in pending)
        last = max(a for a, _ in per)
        counts_late = any(rel > last + low for rel, low in zip(released, late))
        return Estimate(n, h2, orders, tuple(released), counts_late, per, last, max(h2, sum(late)), tuple(before))

    def _types(self, state: tuple[Sub, ...], t: float, est: Estimate) -> Estimate:
        """``est`` with H2 (less n t) at least the batch-type relaxation's bound (:mod:`.meantypes`):
        :math:`V_R` plus the least item costs of the pending jobs, and with requests still to
        arrive, its floor at least :math:`V_A` (module docstring, *Batch types*); unchanged where R
        gives up or is not asked (while the search dives)."""
        if self.types is None or not self.types.solving or not est.n:
            return est
        since = max((self.arrival[i] for i, sub in enumerate(state) if sub != self.start[i]), default=0.0)
        before, waiting, riding, items = [], [], [], 0.0
        for i, sub in enumerate(state):
            if self.is_pending(i, sub):
                items += self.job(i, sub).item
                if sub[2]:
                    riding.append(self.reqs[i].output_tokens - sub[2])
                elif self.arrival[i] > since:
                    waiting.append((self.arrival[i], sub[1] - sub[0], self.reqs[i].output_tokens - 1))
                else:
                    before.append((sub[1] - sub[0], self.reqs[i].output_tokens - 1))
        order = tuple(sorted(riding))
        value = self.types.value(tuple(sorted(before + [(p, q) for _, p, q in waiting])), order)
        raised = value is not None and value + items > est.late
        if value is not None and raised:
            est = est._replace(h2=max(est.h2, value + items), late=value + items)
        if waiting:
            timed = self.types.value(tuple(sorted(before)), order, tuple(sorted(waiting)), since)
            if timed is not None and since * est.n + timed > est.floor:
                est = est._replace(floor=since * est.n + timed)
                raised = raised or est.floor > t * est.n + est.late
        self.types.raised += raised
        return est

    def _split(self, state: tuple[Sub, ...], t: float, est: Estimate) -> Estimate:
        """``est`` with the first-token split (module docstring, *First tokens and the rest*): the
        ttft estimate of ``state`` (kept per subs before their first token), and the rests of the
        requests before their first token (each one's latency job's own cost less its ttft job's)
        plus the own costs of those past it."""
        assert self.first is not None
        key = tuple(sub if sub[2] == 0 else None for sub in state)
        first = self.first_estimates.get(key)
        if first is None:
            first = self.first_estimates[key] = self.first.estimate(state, t)
        if not first.n:  # every pending request is past its first token: the split is H1
            return est
        rest = 0.0
        for i, sub in enumerate(state):
            if self.is_pending(i, sub):
                rest += self.job(i, sub).cost - (self.first.job(i, sub).cost if sub[2] == 0 else 0.0)
        late = max(est.late, first.late + rest)
        counts_late = est.released_late or first.released_late
        return est._replace(released_late=counts_late, late=late, first=first, after=est.n - first.n, rest=rest)

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
    """h at time t from :meth:`SearchProblem.estimate`'s parts: the larger of H2, the order bound
    and, for latency, the first-token split."""
    if t >= est.last and not est.released_late:  # every job released: max(t, a) + c = t + c
        h = est.n * t + est.late
        return h if h >= est.floor else est.floor
    lows = sorted(max(t, a) + c for a, c in est.per)
    terms = [max(t + low, x, rel) for low, x, rel in zip(est.orders, lows, est.released)]
    for r, earlier in est.before:  # the j-th event comes at r or later, or of jobs released before r
        if r > t:
            for j, low in enumerate(earlier):
                bound = t + low if t + low < r else r
                if bound > terms[j]:
                    terms[j] = bound
    h = max(est.n * t + est.h2, sum(terms), est.floor)
    if est.first is None:
        return h
    split = _split_at(est, t)
    return h if h >= split else split


def _split_at(est: Estimate, t: float) -> float:
    """The first-token split of ``est`` (which has one) at time t: the ttft estimate, plus t for
    each pending request past its first token, plus the rests and those requests' own costs."""
    assert est.first is not None
    return estimate_at(est.first, t) + est.after * t + est.rest
