r"""A lower bound on mean TTFT that makes every batch end pay its overhead: ``block-flush-ttft``.

``srpt-prefill-flush`` (:mod:`optsched.ttft_bounds`) gives every first token a whole batch overhead
:math:`\beta_p` after its work, but lets every request have its own overhead for free: under load,
first tokens queue behind each other's batch ends. The bound here prices that queue exactly, on
blocks of requests. It holds for every schedule that replays cleanly under the contract (any policy,
any formulation, evictions or not) and uses only the facts (F0)-(F5) of :mod:`optsched.bounds`.

**The relaxation F.** One machine; job i is released at :math:`r_i` and needs :math:`p_i` of work
(:func:`optsched.load_bounds.share_terms` with ``first_tokens``, column 0: the p_i of the flush
bound). At every moment the machine works on one released job, *flushes* (an interval of length
:math:`\beta_p` in which it does no work), or idles. Job i completes at :math:`C_i`, the end of the
first flush that starts at or after the moment its work is done. Minimise :math:`\sum_i C_i`.

**Every schedule gives a point of F with** :math:`C_i \le FT_i`. Take the construction of the flush
bound's proof: under the linear twin (F0), keep in every batch B the items of each request up to its
first token (F2, F3); a batch with a kept item holds a prefill item and lasts
:math:`T_B \ge \beta_p + \sum_{y \in B} c_y`. Inside :math:`[s_B, e_B]` run the kept item terms one
after the other from :math:`s_B` (they end by :math:`e_B - \beta_p`; a request's work is started
after its arrival, (F1)), then flush in :math:`[e_B - \beta_p, e_B]`. Batches are sequential (F1).
Stop each job once it has had :math:`p_i`: its work is done by the flush of the batch that ends at
:math:`FT_i`, so :math:`C_i \le FT_i`.

**Blocks.** Deleting jobs from a point of F (their work becomes idle time, a flush with no job to
complete may stay) leaves a point of F for the others with the same completions. So for any
partition of the requests into blocks b, :math:`\sum_b \mathrm{OPT}_F(b) \le \sum_i FT_i`, and with
each block's own flush bound :math:`\Phi_b` and ``srpt-prefill`` bound (both hold for any subset
of the requests: their proofs keep only that subset's items) and the whole instance's flush bound,
the mean TTFT is at least

.. math:: \frac1N\Big(\max\Big(\sum_b \max(\mathrm{OPT}_F(b) - \textstyle\sum_{i \in b} r_i,\
          \Phi_b, \Sigma_b),\ \Phi\Big)\Big),

:math:`\Phi_b`, :math:`\Phi` the flush bound's totals (sorted against arrival plus least prefill
alone) of block b and of all requests, :math:`\Sigma_b` the largest ``srpt-prefill`` total of
block b over the share weights.

**Normal form of F.** (1) *Work in SRPT order.* Fix the flush intervals. The machine's working time
is then a fixed set; in its own clock (the working time elapsed) jobs are released at fixed points,
and preemptive SRPT completes by every moment the most jobs any preemptive schedule completes
(Schrage 1968, as in :mod:`optsched.load_bounds`; it holds from any initial remaining works). A
flush completes the jobs done before it and not yet completed, so with SRPT's work every flush
completes at least as many jobs in all up to it, and since the flush ends increase,
:math:`\sum_i C_i` does not grow (Abel summation); a flush that completes no job becomes idle
time. (2) *Flush at a work completion.* Take the flushes in time order. Let flush j start at
:math:`f` and t be the last moment before it at which a job's work is done (after the previous
flush's end, or the flush completes nothing). Exchange the flush with :math:`[t, f]`: the work in
it is done :math:`\beta_p` later, by :math:`f + \beta_p`, so every job's state at
:math:`f + \beta_p` is as before, and the same jobs complete :math:`f - t` earlier. Then apply (1)
to what follows :math:`f + \beta_p` from that state, and go on with flush j + 1: after at most n
flushes the machine runs SRPT (working whenever a released job has work left) and flushes only at
moments when a job's work is done, no worse than the point it started from. At each such moment
the only choice is to flush or to go on: the search enumerates exactly these choices, a binary
tree of depth at most n. It prunes a node (time t, k jobs done and not yet flushed) by the larger
of two lower bounds on its leaves: the cost so far plus :math:`k(t + \beta_p) + \sum_j (S_j +
\beta_p)` over the jobs not done, :math:`S_j` the completions of SRPT without flushes from the
node's state (no continuation does more work by any moment); and the cost so far plus the optimum
of F for the jobs released by t as if no other came (SRPT in order of remaining work, the flushes
closing runs of consecutive completions, an O(m^2) dynamic programme) plus the jobs not yet
released on their own (SRPT without flushes from their releases, plus :math:`\beta_p` each;
deleting jobs is a relaxation, so the two parts add up). A flush after which no released job has
work left starts an independent part: its optimum is that of the jobs not yet released, solved
once and shared by every branch that reaches it. Stopped by its time budget, the search answers
the least of the bound over the nodes not yet explored and of the leaves found (every schedule
lies under one of them), never the best leaf alone.

**Dominated nodes** (:class:`DominanceTable`). A node whose state is no better than that of a node
already expanded is not expanded: the same jobs released, as many done (and as many waiting for
the flush), a moment no earlier, every remaining work (sorted) no smaller and a cost so far no
smaller. Every continuation of it is one of the earlier node's too (that node idles until the same
moments and makes the same choices, its work done no later), so it completes as many jobs by every
moment at no greater cost, and the normal form of that continuation lies under a leaf of the
earlier node. By induction on the jobs done and the work left (both strictly progress from a node
to its children; a dominating node has no more work left, and was expanded first), every schedule
still lies under a leaf, so the answer stays a lower bound, and the search's optimum when it ends.

**Blocks chosen.** Blocks are runs of consecutive arrivals; the busy periods of SRPT without
flushes are kept whole where they fit, and the block size grows (:data:`BLOCK_SIZES`) while the
budget lasts, each block searched within its share of the time left (in proportion to its jobs);
every partition gives a valid bound and the largest is taken.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence

import numpy as np

from .bounds import prefill_alone_times
from .budget import NO_LIMIT, TimeBudget
from .instance import Instance
from .load_bounds import SHARE_WEIGHTS, mix_shares, share_terms, srpt_completions, srpt_mean_bound
from .result import Bound
from .ttft_bounds import SAFETY, flush_mean_bound, flush_overhead

__all__ = [
    "BLOCK_SIZES",
    "BLOCK_TIME",
    "DOMINANCE_KEPT",
    "DominanceTable",
    "Solver",
    "arrival_blocks",
    "block_bound",
    "block_mean_bound",
    "busy_runs",
    "flush_node_bound",
    "flush_relaxation_optimum",
    "srpt_prefill_works",
    "srpt_tail_times",
]

#: A block solver: (releases, works, least first-token times, flush length, budget) -> (lower bound,
#: best value found, exact) of a relaxation's least sum of completions.
Solver = Callable[[np.ndarray, np.ndarray, np.ndarray, float, TimeBudget], tuple[float, float, bool]]

#: The block sizes tried, in order, while the budget lasts.
BLOCK_SIZES = (4, 6, 10, 20, 40, 80, 160, 320)

#: Seconds the block search takes at most (less where the command's budget has less left).
BLOCK_TIME = 10.0

#: The most released jobs for which a node's bound also groups them exactly (an O(m^2) programme).
_GROUPED_MOST = 64

#: The most expanded states a :class:`DominanceTable` keeps for one key (the first ones).
DOMINANCE_KEPT = 64


def _release_upto(t: float, rem: list[float], nxt: int, rel: list[float], work: list[float]) -> int:
    """Add to ``rem`` (sorted) the jobs released by ``t``; the index of the next one."""
    while nxt < len(rel) and rel[nxt] <= t:
        bisect.insort(rem, work[nxt])
        nxt += 1
    return nxt


def _next_done(t: float, rem: list[float], nxt: int, rel: list[float], work: list[float]) -> tuple[float, int]:
    """Run SRPT from ``t`` (``rem`` sorted, changed in place) until a job's work is done; that moment
    and the next unreleased index. Some job must be left."""
    while True:
        if not rem:
            t = max(t, rel[nxt])
            nxt = _release_upto(t, rem, nxt, rel, work)
        finish = t + rem[0]
        if nxt < len(rel) and rel[nxt] < finish:
            rem[0] -= rel[nxt] - t
            t = rel[nxt]
            left = rem.pop(0)
            nxt = _release_upto(t, rem, nxt, rel, work)
            bisect.insort(rem, left)
            continue
        rem.pop(0)
        return finish, _release_upto(finish, rem, nxt, rel, work)


def srpt_tail_times(t: float, rem: list[float], nxt: int, rel: list[float], work: list[float]) -> list[float]:
    """SRPT's completions (ascending), without flushes, of the jobs not done, from the state: time ``t``,
    remaining works ``rem`` (sorted) of the jobs released by t, next unreleased index ``nxt`` of the
    jobs ``rel``, ``work`` (sorted by release). The least k-th completion of every continuation."""
    rem = list(rem)
    out = []
    while rem or nxt < len(rel):
        t, nxt = _next_done(t, rem, nxt, rel, work)
        out.append(t)
    return out


def _srpt_tail(t: float, rem: list[float], nxt: int, rel: list[float], work: list[float]) -> float:
    """Sum of SRPT's completions, without flushes, of the jobs not done, from the state ``(t, rem, nxt)``."""
    return math.fsum(srpt_tail_times(t, rem, nxt, rel, work))


def _grouped(t: float, rem: list[float], k: int, beta: float) -> float:
    """The least sum of completions in F of ``k`` jobs with no work left and jobs of work ``rem``
    (sorted), all released at ``t``: SRPT runs them in order, and each flush closes a run of
    consecutive ones and delays every later one by ``beta`` (O(m^2) dynamic programme)."""
    works = [0.0] * k + rem
    m = len(works)
    done = np.cumsum(works).tolist()
    tail = [0.0] * (m + 1)
    for i in range(m - 1, -1, -1):
        tail[i] = beta * (m - i) + min((e - i + 1) * done[e] + tail[e + 1] for e in range(i, m))
    return m * t + tail[0]


class DominanceTable:
    """The states of the nodes a search has expanded, by key (the jobs released, done and waiting for
    the flush): :meth:`dominated` tells whether a new node is no better than one of them (module
    docstring, *Dominated nodes*) and otherwise records it, at most :data:`DOMINANCE_KEPT` a key."""

    def __init__(self) -> None:
        self.states: dict[tuple[int, ...], list[tuple[float, tuple[float, ...], float]]] = {}

    def dominated(self, key: tuple[int, ...], t: float, rem: list[float], cost: float) -> bool:
        """Whether an expanded node of ``key`` has a moment no later than ``t``, remaining works
        (sorted) each no larger than ``rem``'s and a cost no larger than ``cost``; if not, the node is
        recorded."""
        kept = self.states.setdefault(key, [])
        for t_kept, rem_kept, cost_kept in kept:
            if t_kept <= t and cost_kept <= cost and all(a <= b for a, b in zip(rem_kept, rem)):
                return True
        if len(kept) < DOMINANCE_KEPT:
            kept.append((t, tuple(rem), cost))
        return False


def flush_relaxation_optimum(
    release: np.ndarray, work: np.ndarray, overhead: float, budget: TimeBudget = NO_LIMIT
) -> tuple[float, float, bool]:
    r"""The least :math:`\sum_i C_i` of the relaxation F (module docstring) for jobs released at
    ``release`` needing ``work`` with flushes of length ``overhead``: (a proven lower bound on it,
    the best schedule's value found, whether the search ended: then both are the optimum). The
    search stops once ``budget`` expires; no safety margin is taken."""
    order = np.argsort(release, kind="stable")
    rel, wk = [float(x) for x in release[order]], [float(x) for x in work[order]]
    if not rel:
        return 0.0, 0.0, True
    return _Search(rel, wk, float(overhead), budget).suffix(0)


def flush_node_bound(
    rel: list[float], work: list[float], beta: float
) -> Callable[[float, list[float], int, float], float]:
    """The search's lower bound on F from a state, as a function of (time t at which no flush is
    pending, remaining works of the released jobs (sorted), next job's index, cost so far): jobs
    ``rel``, ``work`` sorted by release; those released by t are taken as released."""
    search = _Search(rel, work, beta, NO_LIMIT)

    def bound(t: float, rem: list[float], nxt: int, cost: float) -> float:
        rem = list(rem)
        nxt = _release_upto(t, rem, nxt, rel, work)
        return search.bound(t, rem, nxt, 0, cost)

    return bound


class _Search:
    """The search of the module docstring over the jobs ``rel``, ``wk`` (sorted by release).

    :meth:`suffix` solves the jobs from index j on, the machine free at their first release; a
    flush after which no released job has work left ends a branch with the suffix of the jobs not
    yet released, solved once (memoised): the part after an idle machine does not depend on the
    part before it."""

    def __init__(self, rel: list[float], wk: list[float], beta: float, budget: TimeBudget) -> None:
        self.rel, self.wk, self.beta, self.budget = rel, wk, beta, budget
        self.count = len(rel)
        self.memo: dict[int, tuple[float, float, bool]] = {self.count: (0.0, 0.0, True)}
        self.alone = [0.0] * (self.count + 1)  # the jobs j.. on their own: SRPT without flushes, beta each
        for j in range(self.count - 1, -1, -1):
            self.alone[j] = _srpt_tail(rel[j], [], j, rel, wk) + (self.count - j) * beta

    def bound(self, t: float, rem: list[float], nxt: int, k: int, cost: float) -> float:
        """A lower bound on every leaf under the node: the work of all without flushes, or the jobs
        released by t grouped exactly (as if nothing else came) plus the others on their own."""
        left = len(rem) + self.count - nxt
        together = k * (t + self.beta) + _srpt_tail(t, rem, nxt, self.rel, self.wk) + left * self.beta
        if k + len(rem) > _GROUPED_MOST:
            return cost + together
        return cost + max(together, _grouped(t, rem, k, self.beta) + self.alone[nxt])

    def suffix(self, start: int) -> tuple[float, float, bool]:
        """(lower bound, best value found, exact) of F on the jobs ``start``.., each in seconds summed."""
        if start in self.memo:
            return self.memo[start]
        rel, wk, beta = self.rel, self.wk, self.beta
        rem0: list[float] = []
        t0, nxt0 = _next_done(rel[start], rem0, _release_upto(rel[start], rem0, start, rel, wk), rel, wk)
        stack = [(self.bound(t0, rem0, nxt0, 1, 0.0), t0, rem0, nxt0, 1, 0.0)]
        best = low = math.inf  # the best leaf found; the least lower bound of a leaf
        exact = True
        expanded = DominanceTable()
        while stack:
            if self.budget.expired():
                low, exact = min(low, min(node[0] for node in stack)), False
                break
            lb, t, rem, nxt, k, cost = stack.pop()
            if lb >= best:
                continue
            if not rem and nxt == self.count:  # all work done: the last flush
                best = low = min(best, cost + k * (t + beta))
                continue
            if expanded.dominated((nxt, len(rem), k), t, rem, cost):
                continue
            flushed = t + beta  # flush now: the k done jobs complete at t + beta
            rem_f = list(rem)
            nxt_f = _release_upto(flushed, rem_f, nxt, rel, wk)
            children = []
            if rem_f:
                t_f, nxt_f = _next_done(flushed, rem_f, nxt_f, rel, wk)
                children.append((cost + k * flushed, t_f, rem_f, nxt_f, 1))
            else:  # idle until the next release: the rest is a suffix
                sub_low, sub_best, sub_exact = self.suffix(nxt_f)
                best = min(best, cost + k * flushed + sub_best)
                low, exact = min(low, cost + k * flushed + sub_low), exact and sub_exact
            rem_c = list(rem)  # go on: one more job's work done before the next flush
            t_c, nxt_c = _next_done(t, rem_c, nxt, rel, wk)
            children.append((cost, t_c, rem_c, nxt_c, k + 1))
            scored = [(self.bound(tc, rc, nc, kc, cc), tc, rc, nc, kc, cc) for cc, tc, rc, nc, kc in children]
            scored.sort(key=lambda node: -node[0])  # the smaller bound explored first
            stack.extend(node for node in scored if node[0] < best)
        self.memo[start] = (low, best, exact)
        return self.memo[start]


def _flush_solver(
    release: np.ndarray, work: np.ndarray, due: np.ndarray, overhead: float, budget: TimeBudget
) -> tuple[float, float, bool]:
    """:func:`flush_relaxation_optimum` as a block solver (the least first-token times ``due`` unused)."""
    return flush_relaxation_optimum(release, work, overhead, budget)


def busy_runs(release: np.ndarray, work: np.ndarray) -> list[int]:
    """Sizes of the runs of consecutive arrivals (sorted) that SRPT without flushes serves in one
    busy period."""
    order = np.argsort(release, kind="stable")
    rel, wk = release[order], work[order]
    runs: list[int] = []
    end = -math.inf
    for r, p in zip(rel.tolist(), wk.tolist()):
        if r > end or not runs:
            runs.append(0)
            end = r
        runs[-1] += 1
        end += p
    return runs


def arrival_blocks(runs: list[int], size: int) -> list[tuple[int, int]]:
    """Blocks (start, stop) of the sorted jobs, at most ``size`` each: whole busy runs packed
    greedily, a longer run cut into pieces of ``size``."""
    out: list[tuple[int, int]] = []
    start = pos = 0
    for run in runs:
        if run > size:
            if pos > start:
                out.append((start, pos))
            out += [(a, min(a + size, pos + run)) for a in range(pos, pos + run, size)]
            start = pos = pos + run
            continue
        if pos + run - start > size:
            out.append((start, pos))
            start = pos
        pos += run
    if pos > start:
        out.append((start, pos))
    return out


def block_mean_bound(
    release: np.ndarray,
    work: np.ndarray,
    alone: np.ndarray,
    overhead: float,
    budget: TimeBudget,
    shared: Sequence[np.ndarray] = (),
    solver: Solver | None = None,
) -> tuple[float, int, bool]:
    """The mean of the module docstring (seconds) for the blocks of each size of :data:`BLOCK_SIZES`
    tried within ``budget``, less the safety margin: (value, block size of the best partition, whether
    every block of it was solved exactly). ``overhead``: beta_p (a test plants a larger, invalid one);
    ``shared``: the works of ``srpt-prefill`` (:func:`optsched.load_bounds.mix_shares`), whose bound on
    each block also raises it; ``solver``: the relaxation solved on each block (default
    :func:`flush_relaxation_optimum`; any with the same answer, given also each job's least first-token
    time, whose optimum bounds the blocks' sums of first-token times)."""
    solver = _flush_solver if solver is None else solver
    n = len(release)
    if n == 0:
        return 0.0, 0, True
    order = np.argsort(release, kind="stable")
    rel, wk, al = release[order], work[order], alone[order]
    shares = [np.asarray(x)[order] for x in shared]
    whole = flush_mean_bound(srpt_completions(rel, wk), rel, al, overhead) * n
    best, best_size, best_exact = whole, 0, True
    runs = busy_runs(rel, wk)
    tried: list[list[tuple[int, int]]] = []
    for size in BLOCK_SIZES:
        blocks = arrival_blocks(runs, size)
        if budget.expired() or blocks in tried:
            continue
        tried.append(blocks)
        total, exact = 0.0, True
        for a, b in blocks:
            r, p = rel[a:b], wk[a:b]
            flush_b = flush_mean_bound(srpt_completions(r, p), r, al[a:b], overhead) * (b - a)
            flush_b = max([flush_b, *(srpt_mean_bound(r, x[a:b], al[a:b]) * (b - a) for x in shares)])
            if budget.expired():  # the rest of this partition: each block's flush bound
                total, exact = total + flush_b, False
                continue
            value, _, done = solver(r, p, r + al[a:b], overhead, budget.share((b - a) / (n - a)))
            exact &= done
            opt = value - math.fsum(r)
            margin = SAFETY * (abs(value) + math.fsum(np.abs(r)))
            total += max(opt - margin, flush_b)
        if total > best:
            best, best_size, best_exact = total, size, exact
        if size >= n:
            break
    return max(0.0, best / n), best_size, best_exact


def srpt_prefill_works(instance: Instance) -> list[np.ndarray]:
    """The works p_i of ``srpt-prefill`` (:mod:`optsched.load_bounds`), one array per weight vector of
    :data:`~optsched.load_bounds.SHARE_WEIGHTS` that applies (a memory share only with a KV capacity)."""
    has_memory = instance.limits.kv_capacity is not None
    terms = share_terms(instance, True)
    return [mix_shares(terms, w, has_memory) for w in SHARE_WEIGHTS if has_memory or not w[2]]


def block_bound(
    instance: Instance,
    budget: TimeBudget = NO_LIMIT,
    name: str = "block-flush-ttft",
    solver: Solver | None = None,
    rule: str = "",
    source: str = "optsched/ttft_block_bounds.py",
) -> Bound:
    """The ``block-flush-ttft`` :class:`~optsched.result.Bound` (mean TTFT, seconds) within ``budget``
    (at most :data:`BLOCK_TIME` s); with ``solver`` (:func:`block_mean_bound`), the bound ``name`` of
    that relaxation, whose extra ``rule`` and module ``source`` its note states."""
    release = np.array([r.arrival for r in instance.requests], dtype=np.float64)
    work = share_terms(instance, True)[:, 0]
    alone = prefill_alone_times(instance, [r.prompt_tokens for r in instance.requests])
    beta = flush_overhead(instance)
    value, size, exact = block_mean_bound(
        release, work, alone, beta, budget.within(BLOCK_TIME), srpt_prefill_works(instance), solver
    )
    if size == 0:
        how = "no block partition tried is above the whole instance's flush bound, which is listed"
    else:
        what = "exact optimum" if exact else "a search cut by time: its least open node"
        how = f"{what} on blocks of at most {size} consecutive arrivals"
    note = (
        f"one machine, SRPT over each request's prefill work, "
        f"every batch end a flush of {beta:.3g} s of its time{rule}; "
        f"{how} ({source})"
    )
    return Bound(name, value, True, note)
