r"""The batch-type relaxation of the exact mean-latency search (:mod:`.meansearch`): a lower bound on
the sum of the finish times still to come that prices the prefill batches the decoding requests
wait through or ride in.

**The relaxation R.** A request before its first token has p prefill tokens left and q = O - 1
tokens after its first; one past its first token has d tokens left. A batch of R has a type: a
*prefill batch* processes at most :math:`P' = \min(C, P)` prompt tokens (any split of them among
the requests, chunks of any size), a *decode batch* none. A request's prompt is done in the batch
that processes its last token, and the request then needs q more batches; one past its first token
moves one token on in every batch that it *rides*. Without evictions every request past its first
token rides in every decode batch, in a prefill batch only if that batch is *mixed*, which costs
:math:`\tau_M = b + t + \pi + \delta + \mu` (base, one tile, both biases, the longest-KV term of one
slot), a decode batch :math:`\tau_D = b + t + \delta + \mu` and an unmixed prefill batch
:math:`\tau_P = b + t + \pi`; without hybrid batches no prefill batch is mixed. With evictions, a
request past its first token may get its next token by a refill, a prefill item, so it rides in
every batch; a prefill batch then costs :math:`\tau_P`, and a decode batch is priced as the cheaper
of a decode batch and a prefill batch (a batch of refills alone is a prefill batch). A batch of a
type also holds at least one item of each phase it has, at least :math:`\epsilon_P` (one prompt
token: per-token, prefill per-token and squared terms) or :math:`\epsilon_D` (one decode at one KV
slot), :math:`\epsilon_k` in all. R's value :math:`V_R(s)` is the least over R's schedules of
:math:`\sum_k \tau_k U_k + \epsilon_k (U_k - 1)`, with :math:`U_k` the requests not finished before
batch k. It ignores arrivals, the KV capacity M and :math:`R_{max}`.

**Bound.** From state s at time t, every schedule has :math:`\sum_i (F_i - t) \ge V_R(s) + \sum_i
\iota_i`, with :math:`\iota_i` the least item cost of request i's remaining work (its job's ``item``
in :mod:`.meanproblem`). Proof: :math:`\sum_i (F_i - t) \ge \sum_k c_k U_k` (idle time only adds),
and batch k costs :math:`c_k \ge \tau_{type(k)} + \iota(k)` with :math:`\iota(k)` its items' terms
(the cost model is a sum of non-negative terms: base, a tile, each bias present, the longest-KV
term, the items'), where the type is *prefill* when the batch holds a prefill item (mixed when it
holds a decode item too), else *decode*; the items are those of requests not finished before k, so
:math:`U_k \ge 1` and :math:`\sum_k \iota(k) U_k \ge \sum_k \iota(k) + \sum_k \epsilon_k (U_k - 1)
\ge \sum_i \iota_i + \sum_k \epsilon_k (U_k - 1)`. R follows the schedule's types batch by batch and
spends each prefill batch's P' tokens on the prompts in the order of the schedule's first tokens, the
earliest unfinished first. By induction over the batches, R has processed at least as many tokens of
the first j prompts in that order as the schedule (each batch of the schedule holds at most P'
prefill tokens, refills included), so every prompt is done in R no later; a request then rides in R
in every batch that the schedule could give it a token in (a decode item needs a decode or mixed
batch; a refill a prefill batch, and refills need evictions), so every request finishes in R no
later, and R's :math:`U_k` are at most the schedule's. So :math:`\sum_k \tau_k U_k + \epsilon_k (U_k
- 1)` of the schedule is at least R's for that schedule, which is at least :math:`V_R(s)`.

**Solving R.** :math:`V_R` is a recursion over R's states (the sorted (p, q) of the requests before
their first token, the sorted d of the others): a decode batch (when a request rides), or a prefill
batch that completes a set S of prompts and spends what is left on one more prompt, larger than that
rest; requests that ride move on, and those of S start their q. A prefill batch that leaves
capacity unused while a prompt could take it is left out: processing more tokens never makes a
prompt done later, so no request finishes later. Two prompts part-done are never needed: moving
tokens from the later-done to the earlier-done one makes neither later. The values, and the prefill
batches of each set of prompts left, are kept between calls; a call adds at most
:data:`CALL_STATES` values (those within the grace from the first call, at the search's start, any
number until the grace ends: :data:`TIME_GRACE`, at most :data:`GRACE_SHARE` of the search's
budget), gives up when the search's clock runs out or after the grace, and solves nothing new while
the calls that did have taken more than the grace plus a share of the time since the first:
:data:`TIME_SHARE` while at least :data:`PAYS` of the calls (after :data:`TRIAL`) have raised h,
else :data:`IDLE_SHARE`. The search does not ask for it while it dives (then the estimate goes
without R, which lowers it and is never wrong).

**Arrivals.** R ignores arrivals; :math:`V_A(s, c)` keeps them. R there has a clock, from c, and
the requests that arrive after it (arrival a, p, q): a batch advances the clock by :math:`\tau_k +
\epsilon_k`, at most its cost, and takes prompt tokens of arrived requests only, or R waits to the
next arrival (every request not finished counting the wait). :math:`V_A` is the least sum over the
requests of their finish time less c. Bound: from state s at any time :math:`t \ge c` where every
request that has been in a batch arrived by c, :math:`\sum_i (F_i - c) \ge V_A(s, c)`. Proof: R
follows the schedule as above, starting its batch k at :math:`S^R_k = \max(S^R_{k-1} + \tau_{k-1} +
\epsilon_{k-1}, A_k)`, with :math:`A_k` the latest arrival of the requests in the schedule's batch k
(c for the first). By induction :math:`S^R_k \le S_k`, the schedule's start (:math:`S_k \ge S_{k-1} +
c_{k-1}` and :math:`S_k \ge A_k`), so every request the schedule serves in batch k has arrived in R
by then, and R spends the batch's P' tokens on the arrived prompts in the order of the schedule's
first tokens: R has still processed at least as many tokens of the first j prompts as the schedule
(a prompt the schedule serves in batch k has arrived in R), and every request finishes in R no later
(at the end of the same batch, which ends in R no later). Once every request has arrived R waits no
more, and its sum from there, :math:`\sum_k (\tau_k + \epsilon_k) U_k`, is at least :math:`V_R` of
its state then: the recursion is R's with the clock and the arrivals in its states, :math:`V_R`
once every request has arrived; its states count against the same caps.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from itertools import groupby

from ...budget import TimeBudget
from ...costmodel import Coefficients

__all__ = [
    "CALL_STATES",
    "GRACE_SHARE",
    "IDLE_SHARE",
    "MAX_STATES",
    "PAYS",
    "TIME_GRACE",
    "TIME_SHARE",
    "TRIAL",
    "TypeRelaxation",
]

#: New states of R that one call may solve once the grace from the first call has passed (those
#: within it, at the search's start, may take what is left of the grace).
CALL_STATES = 1024
#: States of R kept at most (about 0.3 kB each with 8 requests); a call that would pass it gives up.
MAX_STATES = 250_000
#: New states of R solved between two looks at the clock.
CLOCK_STATES = 256
#: The grace (seconds): the time that the calls which solve new states may take beyond
#: :data:`TIME_SHARE` of the time since the first call, and the first call's.
TIME_GRACE = 4.0
#: The most of a search's budget that its grace may be (:meth:`TypeRelaxation.within`).
GRACE_SHARE = 0.1
#: The share of the time since the first call that those calls may take beyond the grace
#: while the answers pay (:data:`PAYS`), else :data:`IDLE_SHARE`.
TIME_SHARE = 0.5
IDLE_SHARE = 0.05
#: Calls after which the answers pay only while they have raised h in at least this share of them.
TRIAL = 256
PAYS = 0.1

Pending = tuple[tuple[int, int], ...]
Waiting = tuple[tuple[float, int, int], ...]
#: A kind of batch of R's: its least cost beyond the items' terms (base, tile, biases and the
#: decodes' longest-KV term), and the least item terms it holds (one item of each phase it has).
Kind = tuple[float, float]


class _GaveUp(Exception):
    """A call of :meth:`TypeRelaxation.value` passed its caps or the clock."""


class TypeRelaxation:
    """:math:`V_R` of the module docstring for one instance's limits and cost model.

    Parameters
    ----------
    coef
        The cost model's folded coefficients.
    step
        :math:`P' = \\min(C, P)`.
    evict, hybrid
        Whether evictions (so refills) and mixed batches are allowed.
    """

    def __init__(self, coef: Coefficients, step: int, evict: bool, hybrid: bool) -> None:
        base = coef.base + coef.per_tile
        self.step = step
        prefill_item = coef.per_token + coef.prefill_per_token + coef.prefill_per_token_sq
        decode_item = coef.per_token + coef.decode_per_token + coef.decode_per_kv
        decode = (base + coef.decode_bias + coef.decode_per_max_kv, decode_item)
        prefill = (base + coef.prefill_bias, prefill_item)
        mixed = (prefill[0] + coef.decode_bias + coef.decode_per_max_kv, prefill_item + decode_item)
        #: The kinds of batch without prompt tokens of R's (a batch of refills alone with evictions).
        self.decode_kinds = (decode, prefill) if evict else (decode,)
        #: The kinds of prefill batch, each with whether the requests past their first token ride in it.
        self.prefill_kinds = (
            ((prefill, True),) if evict else ((prefill, False), (mixed, True)) if hybrid else ((prefill, False),)
        )
        self.values: dict[tuple[Pending, tuple[int, ...]], float] = {}
        #: The values of :math:`V_A` (module docstring, *Arrivals*), by (before, waiting, riding, clock).
        self.timed: dict[tuple[Pending, Waiting, tuple[int, ...], float], float] = {}
        #: The prefill batches of each ``before`` met (:meth:`prefills`), shared by the states that
        #: differ in their requests past the first token.
        self.batches: dict[Pending, list[tuple[Pending, list[int]]]] = {}
        #: Whether the search's clock has run out (:meth:`within`).
        self.expired: Callable[[], bool] = lambda: False
        #: Whether the search's estimates ask for R (not while it dives: siblings with and without
        #: a value known would not compare).
        self.solving = True
        #: When the first call came, and the time the calls that solved new states took.
        self.started: float | None = None
        self.spent = 0.0
        #: The calls (outside the dives), and those whose answer raised h (counted by the caller).
        self.calls = self.raised = 0
        self._left, self._until = 0, 0.0
        #: The grace of this search (:data:`TIME_GRACE`, less under a short budget).
        self.grace = TIME_GRACE

    def value(
        self, before: Pending, riding: tuple[int, ...], waiting: Waiting = (), clock: float = 0.0
    ) -> float | None:
        """:math:`V_R` of the requests before their first token, ``before`` (sorted (p, q)), and
        those past it, ``riding`` (sorted d); with ``waiting``, the sorted (a, p, q) of requests that
        arrive after ``clock``, :math:`V_A` at ``clock`` (module docstring, *Arrivals*). None where
        it does not answer: past its time share, its caps or the clock."""
        self.calls += 1
        found = self.timed.get((before, waiting, riding, clock)) if waiting else self.values.get((before, riding))
        if found is not None:
            return found
        now = time.perf_counter()
        if self.expired():
            return None
        if self.started is None:
            self.started = now
        elif self.spent > self.grace + self._share() * (now - self.started):
            return None
        opening = now < self.started + self.grace  # the calls of the search's start share the grace
        self._left = MAX_STATES if opening else CALL_STATES
        self._until = (self.started if opening else now) + self.grace
        try:
            return self._solve_at(before, waiting, riding, clock)
        except _GaveUp:
            return None
        finally:
            self.spent += time.perf_counter() - now

    def clear(self) -> None:
        """Forget every value kept."""
        self.values.clear()
        self.timed.clear()
        self.batches.clear()

    def within(self, budget: TimeBudget) -> None:
        """Answer within the search's ``budget``: give up once it expires, and take at most
        :data:`GRACE_SHARE` of it as the grace."""
        self.expired = budget.expired
        left = budget.left()
        if left is not None:
            self.grace = min(TIME_GRACE, GRACE_SHARE * left)

    def _share(self) -> float:
        """The share of the time that the calls solving new states may take (module docstring)."""
        pays = self.calls < TRIAL or self.raised >= PAYS * self.calls
        return TIME_SHARE if pays else IDLE_SHARE

    def _solve(self, before: Pending, riding: tuple[int, ...]) -> float:
        key = (before, riding)
        found = self.values.get(key)
        if found is not None:
            return found
        n = len(before) + len(riding)
        if not n:
            return 0.0
        self._count()
        values, best = self.values, math.inf
        for (tau, item), rest, on in self._batches(before, riding):
            then = values.get((rest, on))  # looked up here: most are known
            if then is None:
                then = self._solve(rest, on)
            value = tau * n + item * (n - 1) + then
            if value < best:
                best = value
        values[key] = best
        return best

    def _solve_at(self, before: Pending, waiting: Waiting, riding: tuple[int, ...], clock: float) -> float:
        """:math:`V_A` (module docstring, *Arrivals*) at R's ``clock``, ``waiting`` the sorted (a, p, q)
        of the requests arriving after it."""
        if not waiting:
            return self._solve(before, riding)
        key = (before, waiting, riding, clock)
        found = self.timed.get(key)
        if found is not None:
            return found
        self._count()
        n = len(before) + len(waiting) + len(riding)
        arrival = waiting[0][0]
        best = n * (arrival - clock) + self._solve_at(*_arrived(before, waiting, arrival), riding, arrival)
        timed = self.timed
        for kind, rest, on in self._batches(before, riding):
            took = kind[0] + kind[1]
            then = clock + took
            come, still = _arrived(rest, waiting, then)
            after = timed.get((come, still, on, then)) if still else None  # looked up here: most are known
            value = took * n + (after if after is not None else self._solve_at(come, still, on, then))
            if value < best:
                best = value
        timed[key] = best
        return best

    def _count(self) -> None:
        """Count one new state; raise :class:`_GaveUp` past the call's caps or the clock."""
        self._left -= 1
        if self._left < 0 or len(self.values) + len(self.timed) >= MAX_STATES:
            raise _GaveUp
        if self._left % CLOCK_STATES == 0 and (self.expired() or time.perf_counter() > self._until):
            raise _GaveUp

    def _batches(self, before: Pending, riding: tuple[int, ...]) -> Iterator[tuple[Kind, Pending, tuple[int, ...]]]:
        """R's batches from (``before``, ``riding``): each one's kind and the state after it (module
        docstring, *Solving R*)."""
        moved = tuple(d - 1 for d in riding if d > 1)
        for kind in self.decode_kinds if riding else ():
            yield kind, before, moved
        batches = self.batches.get(before)
        if batches is None:
            batches = self.batches[before] = self.prefills(before)
        for kind, rides in self.prefill_kinds if riding else self.prefill_kinds[:1]:
            on = list(moved) if rides else list(riding)
            for rest, started in batches:
                yield kind, rest, tuple(sorted(on + started))

    def prefills(self, before: Pending) -> list[tuple[Pending, list[int]]]:
        """The prefill batches of R from ``before`` (module docstring, *Solving R*): the prompts
        left, and the q of the requests whose prompts are done. Requests alike are taken as a
        multiset (which of them a batch completes makes no difference), and a set of prompts done
        is grown only while it fits in the step."""
        groups = [(pq, len(list(alike))) for pq, alike in groupby(before)]  # (p, q) and how many have it
        out: dict[Pending, list[int]] = {}
        _done_sets(groups, 0, self.step, [], out)
        for (p, q), _ in groups:  # nothing done: one prompt takes the whole batch
            if p > self.step:
                out.setdefault(_replaced(before, (p, q), p - self.step), [])
        return list(out.items())


def _done_sets(
    groups: list[tuple[tuple[int, int], int]], g: int, left: int, done: list[int], out: dict[Pending, list[int]]
) -> None:
    """For :meth:`TypeRelaxation.prefills`: every choice of how many of each group from ``g`` on are
    done, within ``left`` tokens, with ``done`` the counts chosen before ``g``; each nonempty one's
    batches into ``out``."""
    if g == len(groups):
        if any(done):
            _add_batches(groups, done, left, out)
        return
    (p, _), count = groups[g]
    for k in range(min(count, left // p if p else count) + 1):
        done.append(k)
        _done_sets(groups, g + 1, left - k * p, done, out)
        done.pop()


def _add_batches(
    groups: list[tuple[tuple[int, int], int]], done: list[int], left: int, out: dict[Pending, list[int]]
) -> None:
    """For :meth:`TypeRelaxation.prefills`: the batches that complete ``done[g]`` requests of each
    group g, ``left`` tokens to spare: with prompts left, one of those that do not fit takes the rest
    of the step (none is left when one that fits would be done too)."""
    rest = tuple(pq for (pq, count), k in zip(groups, done) for _ in range(count - k))
    started = [q for ((_, q), _), k in zip(groups, done) for _ in range(k) if q > 0]
    if not rest:
        out.setdefault((), started)
    elif left == 0:
        out.setdefault(rest, started)
    else:
        for pq in dict.fromkeys(rest):
            if pq[0] > left:
                out.setdefault(_replaced(rest, pq, pq[0] - left), started)


def _replaced(pending: Pending, pq: tuple[int, int], p: int) -> Pending:
    """``pending`` (sorted) with one ``pq`` given the prompt tokens ``p`` instead, sorted."""
    j = pending.index(pq)
    return tuple(sorted(pending[:j] + pending[j + 1 :] + ((p, pq[1]),)))


def _arrived(before: Pending, waiting: Waiting, clock: float) -> tuple[Pending, Waiting]:
    """``before`` and ``waiting`` with the requests arrived by ``clock`` moved from the second to the first."""
    if not waiting or waiting[0][0] > clock:
        return before, waiting
    come = [(p, q) for a, p, q in waiting if a <= clock]
    return tuple(sorted(before + tuple(come))), tuple(w for w in waiting if w[0] > clock)
