r"""A lower bound on mean TTFT in which a batch admits only the prompts that arrived before it starts:
``block-batch-ttft``.

``block-flush-ttft`` (:mod:`optsched.ttft_block_bounds`) solves the flush relaxation F exactly on
blocks of arrivals. F lets an arriving job preempt the running work at once and for free; a batch
of the contract cannot: it holds only requests that arrived by its start (F1), so an arrival waits
for the running batch to end, or the running prompt is cut short at a batch end of its own. The
relaxation here keeps that, and holds for every schedule that replays cleanly under the contract
(any policy, any formulation, evictions or not), from the facts (F0)-(F5) of :mod:`optsched.bounds`.

**The relaxation G.** One machine; job i is released at :math:`r_i` and needs :math:`p_i` of work
(the p_i of F: :func:`optsched.load_bounds.share_terms` with ``first_tokens``, column 0). The
machine runs *segments*: segment j starts at :math:`s_j`, at or after the end :math:`e_{j-1}` of
the one before, works for some time on jobs released by :math:`s_j` only (preemptively, in any
division), may idle, and ends with a flush of length :math:`\beta_p` at :math:`e_j`. Job i completes
at :math:`C_i`, the end of the segment in whose work its work is done. Minimise :math:`\sum_i C_i`.

**Every schedule gives a point of G with** :math:`C_i \le FT_i`. As in F: under the linear twin
(F0), keep in every batch B the items of each request up to its first token (F2, F3); a batch with
a kept item lasts :math:`T_B \ge \beta_p + \sum_{y \in B} c_y`. Make B a segment with
:math:`s_j = s_B`: its kept item terms run one after the other from :math:`s_B` (every one of a
request that arrived by :math:`s_B`, (F1)), then it idles, then flushes in
:math:`[e_B - \beta_p, e_B]`. Batches are sequential (F1), so the segments are; request i's work
is done within the batch that ends at :math:`FT_i`, so :math:`C_i \le FT_i`. G is F with the
admission rule added, so its optimum is at least F's.

**Least first-token times.** Let :math:`D_i = r_i + A_i`, :math:`A_i` request i's least prefill
alone (:func:`optsched.bounds.prefill_alone_time`; :math:`FT_i \ge D_i` in every schedule), and
:math:`C_{(k)}`, :math:`D_{(k)}`, :math:`FT_{(k)}` the k-th smallest of each. The search minimises
:math:`\sum_k \max(C_{(k)}, D_{(k)})` over G. Every step of the normal form below makes the number
of completions by every moment no smaller, so it keeps the sorted completions pointwise no larger:
for every schedule some point of G in normal form has :math:`C_{(k)} \le FT_{(k)}` for every k
(from :math:`C_i \le FT_i`), and as :math:`FT_i \ge D_i` for every i, :math:`FT_{(k)} \ge
D_{(k)}`; so :math:`\sum_k \max(C_{(k)}, D_{(k)}) \le \sum_k FT_{(k)} = \sum_i FT_i`, and the
least over the normal forms is a lower bound. The segments complete jobs in time order, so a
segment that completes k jobs after c others pays :math:`\sum_{q=c+1}^{c+k} \max(e_j, D_{(q)})`.
A node is pruned by the larger of F's bound from its state (on :math:`\sum C`, no larger) and
:math:`\sum_q \max(S_q + \beta_p, D_{(c+q)})` over the jobs not done, :math:`S_q` the q-th
completion of SRPT without flushes from the state (no continuation completes its q-th job sooner).

**Blocks.** Deleting jobs from a point of G (their work becomes idle time) leaves a point of G for
the others with the same completions, so for any partition into blocks the blocks' optima (with
the least first-token times of their own requests) add up to at most :math:`\sum_i FT_i`; the
blocks and their per-block floors are those of :func:`optsched.ttft_block_bounds.block_mean_bound`,
with G's optimum for F's.

**Normal form of G.** (1) *Work in SRPT order.* Fix every segment's start, working time and end.
In the clock of the working time elapsed, job i is released at the working-clock start of the
first segment that starts at or after :math:`r_i`, and a job completes at the end of the segment
in which its work is done: preemptive SRPT completes by every moment the most jobs any preemptive
schedule does (Schrage 1968), so by every segment end, and :math:`\sum_i C_i` does not grow (Abel
summation). Within a segment no job is released, so SRPT runs its jobs in order of remaining work,
each to its end, the last possibly cut. (2) *No idle before a segment's own work is over.* A
segment that idles while a job it may work on has work left works instead (more work by every
segment end). (3) *Starts.* If :math:`s_j > e_{j-1}` and no job is released in
:math:`(s', s_j]`, :math:`s' = \max(e_{j-1}, \text{latest release} \le s_j)`, the segment may
start at :math:`s'` with the same jobs and more working time: so :math:`s_j = e_{j-1}` or
:math:`s_j` is a release time. (4) *Ends.* Let segment j's work end at a moment that is neither a work completion
nor such that its flush ends at a release time after :math:`s_j`. If no segment follows, drop the
cut work (it completes nothing): the segment's completions come earlier. If the next segment starts
at :math:`s_{j+1} = e_j`, move the flush of segment j and the start of segment j + 1 earlier by
:math:`\epsilon` small, segment j + 1 keeping its end: segment j's last :math:`\epsilon` of work
(on a job not done by its end) moves into segment j + 1, whose jobs are the same (no release in
:math:`(e_j - \epsilon, e_j]`), released :math:`\epsilon` earlier in the working clock: by (1)
every segment end completes at least as many jobs; repeat until the work ends at a completion or
the flush ends at a release (a segment left with no work is a flush that completes nothing: idle
time). Otherwise the next segment starts at a release :math:`r > e_j` (by (3)); for each such r
the search adds a *gap child*: the g jobs done in segment j complete at :math:`s_j` plus their
work plus :math:`\beta_p` (no later than :math:`e_j`), the job in progress gets all the work it
could get before a flush that ends before r (its work up to :math:`r - \beta_p - s_j` in the
segment), and the next node is at r. Every such segment (any cut, any flush end before r) leaves at
r a state with no job's work left larger and no completion later, from which its continuation is
feasible and completes no job later; with (5), only :math:`r \le e_j + \beta_p` are needed. A
gap child need not be a point of G, so the search's least leaf is at most G's optimum: a lower
bound all the same (every normal form lies under a leaf, every step above making the number of
completions by every moment no smaller). So the search enumerates segments that start at the
previous end or at a release, run their jobs shortest first, and end their work at a job's
completion or so that the flush ends at a release time :math:`r > s_j`, and the gap children. (5) *No long waits.* Let
s be the first moment a segment may start with a job to work on (the previous end, or the next
release if no released job is left). A segment that starts at a release :math:`r > s + \beta_p` is
dominated by one that starts at s, works shortest first and flushes so as to end at r (or, its
work done sooner, ends earlier and idles until r): at r the same jobs are taken, no job has more
work left, and the jobs done complete at r, before any completion of the waiting branch; from that
state the waiting branch's continuation is feasible and completes no job later. Each
segment's start is s or a release in :math:`(s, s + \beta_p]`. The search prunes a node by the
bounds of F's search from the same state (G's continuations are F's), skips a node dominated by
one already expanded (the same jobs released and done, a moment no earlier, no less work left and
no cheaper: :class:`optsched.ttft_block_bounds.DominanceTable`, proven there; a continuation of it
is one of the earlier node's, with as many completions by every moment), and a flush after which no
released job has work left starts an independent part (the jobs not yet released), solved once.
Stopped by its time budget, it answers the least bound over its open nodes and leaves found;
on each block the larger of that and F's optimum (:func:`batch_relaxation_bound`) is used.
"""

from __future__ import annotations

import bisect
import math

import numpy as np

from .budget import NO_LIMIT, TimeBudget
from .instance import Instance
from .phase_bounds import ttft_plus_rest
from .result import Bound
from .ttft_block_bounds import (
    DominanceTable,
    block_bound,
    flush_node_bound,
    flush_relaxation_optimum,
    srpt_tail_times,
)

__all__ = ["batch_bound", "batch_relaxation_bound", "batch_relaxation_optimum", "block_bounds"]


def batch_relaxation_optimum(
    release: np.ndarray,
    work: np.ndarray,
    overhead: float,
    budget: TimeBudget = NO_LIMIT,
    due: np.ndarray | None = None,
) -> tuple[float, float, bool]:
    r"""The least :math:`\sum_k \max(C_{(k)}, D_{(k)})` of the relaxation G (module docstring) for
    jobs released at ``release`` needing ``work`` with flushes of length ``overhead``, against the
    least first-token times ``due`` (D; default none, the least :math:`\sum_i C_i`): (a proven lower
    bound on it, the best schedule's value found, whether the search ended: then both are the
    optimum). The search stops once ``budget`` expires; no safety margin is taken."""
    order = np.argsort(release, kind="stable")
    rel, wk = [float(x) for x in release[order]], [float(x) for x in work[order]]
    if not rel:
        return 0.0, 0.0, True
    floors = sorted(float(x) for x in due) if due is not None else [-math.inf] * len(rel)
    return _Search(rel, wk, float(overhead), budget, floors).suffix(0)


def _admit(t: float, rem: list[float], nxt: int, rel: list[float], wk: list[float]) -> tuple[list[float], int]:
    """``rem`` (sorted) with the jobs released by ``t`` added; the index of the next one."""
    out = list(rem)
    while nxt < len(rel) and rel[nxt] <= t:
        bisect.insort(out, wk[nxt])
        nxt += 1
    return out, nxt


class _Search:
    """The search of the module docstring over the jobs ``rel``, ``wk`` (sorted by release).

    A node is the moment ``t`` a flush ends (or the machine is free), the remaining works ``rem``
    (sorted) of the released jobs not done, the next unreleased index and the cost so far.
    :meth:`suffix` solves the jobs from index j on with the machine free at their first release."""

    def __init__(self, rel: list[float], wk: list[float], beta: float, budget: TimeBudget, due: list[float]) -> None:
        self.rel, self.wk, self.beta, self.budget, self.due = rel, wk, beta, budget, due
        self.count = len(rel)
        self.flush_floor = flush_node_bound(rel, wk, beta)
        self.memo: dict[int, tuple[float, float, bool]] = {self.count: (0.0, 0.0, True)}

    def paid(self, done: int, k: int, end: float) -> float:
        """The cost of the completions ``done`` + 1 .. ``done`` + k, all at ``end``."""
        return math.fsum(max(end, d) for d in self.due[done : done + k])

    def floor(self, t: float, rem: list[float], nxt: int, cost: float) -> float:
        """A lower bound on every leaf under the node: F's bound from the same state, or the k-th
        completion of SRPT without flushes from it plus a flush, each against its floor."""
        done = nxt - len(rem)
        jobs, after = _admit(t, rem, nxt, self.rel, self.wk)
        tail = srpt_tail_times(t, jobs, after, self.rel, self.wk)
        each = math.fsum(max(c + self.beta, d) for c, d in zip(tail, self.due[done:]))
        return cost + max(each, self.flush_floor(t, rem, nxt, 0.0))

    def segments(self, t: float, rem: list[float], nxt: int) -> list[tuple[float, list[float], int, int, float]]:
        """Every segment of the normal form from the node, and the gap children (module docstring):
        (the next node's time, remaining works, next index, jobs completed, when they complete)."""
        rel, beta = self.rel, self.beta
        out = []
        first = t if rem or (nxt < self.count and rel[nxt] <= t) else rel[nxt]
        for s in [first] + [r for r in rel[nxt:] if first < r <= first + beta]:
            jobs, after = _admit(s, rem, nxt, rel, self.wk)
            done = np.cumsum(jobs).tolist()
            for k, end in enumerate(done, 1):  # the work ends at the k-th completion
                out.append((s + end + beta, jobs[k:], after, k, s + end + beta))
            for r in rel[after:]:  # the flush ends at a release: the job in progress is cut
                w = r - beta - s
                if not 0.0 < w < done[-1]:
                    continue
                k = bisect.bisect_left(done, w)
                if done[k] == w:
                    continue
                left = jobs[k:]
                left[0] -= w - (done[k - 1] if k else 0.0)
                left.sort()
                out.append((r, left, after, k, r))
            for r in rel[after:]:  # the gap children: g done, the next cut, a flush, idle until r
                for g in range(1, len(jobs)):
                    low = s + done[g - 1] + beta
                    if low < r < s + done[g] + 2.0 * beta:
                        gap = jobs[g:]
                        gap[0] = max(0.0, gap[0] - (min(r - beta - s, done[g]) - done[g - 1]))
                        gap.sort()
                        out.append((r, gap, after, g, low))
        return out

    def suffix(self, start: int) -> tuple[float, float, bool]:
        """(lower bound, best value found, exact) of G on the jobs ``start``.., each in seconds summed."""
        if start in self.memo:
            return self.memo[start]
        t0 = self.rel[start]
        root: list[float] = []
        stack = [(self.floor(t0, root, start, 0.0), t0, root, start, 0.0)]
        best = low = math.inf
        exact = True
        expanded = DominanceTable()
        while stack:
            if self.budget.expired():
                low, exact = min(low, min(node[0] for node in stack)), False
                break
            lb, t, rem, nxt, cost = stack.pop()
            if lb >= best:
                continue
            if not rem and nxt == self.count:
                best = low = min(best, cost)
                continue
            if not rem and nxt > start and self.rel[nxt] >= t:  # an idle machine: the rest is a suffix
                sub_low, sub_best, sub_exact = self.suffix(nxt)
                best = min(best, cost + sub_best)
                low, exact = min(low, cost + sub_low), exact and sub_exact
                continue
            if expanded.dominated((nxt, len(rem)), t, rem, cost):
                continue
            scored = []
            done = nxt - len(rem)
            for end, left, after, k, when in self.segments(t, rem, nxt):
                c = cost + self.paid(done, k, when)
                scored.append((self.floor(end, left, after, c), end, left, after, c))
            scored.sort(key=lambda node: -node[0])
            stack.extend(node for node in scored if node[0] < best)
        self.memo[start] = (low, best, exact)
        return self.memo[start]


def batch_relaxation_bound(
    release: np.ndarray, work: np.ndarray, due: np.ndarray, overhead: float, budget: TimeBudget = NO_LIMIT
) -> tuple[float, float, bool]:
    """:func:`batch_relaxation_optimum` against the least first-token times ``due``, its lower bound
    raised to F's optimum (:func:`optsched.ttft_block_bounds.flush_relaxation_optimum`, solved first
    within half of ``budget``): both bound the sum of first-token times (module docstring)."""
    flush_low, _, _ = flush_relaxation_optimum(release, work, overhead, budget.share(0.5))
    low, best, exact = batch_relaxation_optimum(release, work, overhead, budget, due)
    return max(low, flush_low), best, exact


def batch_bound(instance: Instance, budget: TimeBudget = NO_LIMIT) -> Bound:
    """The ``block-batch-ttft`` :class:`~optsched.result.Bound` (mean TTFT, seconds) within ``budget``
    (at most :data:`~optsched.ttft_block_bounds.BLOCK_TIME` s)."""
    rule = ", a batch taking only the requests arrived by its start"
    return block_bound(
        instance, budget, "block-batch-ttft", batch_relaxation_bound, rule, "optsched/ttft_batch_bounds.py"
    )


def block_bounds(instance: Instance, budget: TimeBudget = NO_LIMIT, objective: str = "ttft") -> list[Bound]:
    """``block-flush-ttft`` and ``block-batch-ttft`` within ``budget`` (each at most
    :data:`~optsched.ttft_block_bounds.BLOCK_TIME` s); for ``objective`` ``latency``, the first plus the
    rest after each first token, ``block-ttft-plus-rest`` (:mod:`optsched.phase_bounds`)."""
    if objective == "latency":
        return [ttft_plus_rest(instance, block_bound(instance, budget), "block-ttft-plus-rest")]
    return [block_bound(instance, budget), batch_bound(instance, budget)]
