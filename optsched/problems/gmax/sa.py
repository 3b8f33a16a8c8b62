"""Simulated annealing of the SLO-aware paper (Algorithm 1, Section 4.3) and its instance assignment
(Algorithm 2, Section 4.4), with the corrections D1-D8 of docs/gmax.md.

Solution: an ordered list of batches of request indices (D5: the batch boundaries are returned,
not only a priority). Starting points (D7, D8): requests sorted by predicted e2e at
:math:`b = B_{max}`, and the input order, each cut into consecutive chunks of :math:`B_{max}`
(greedily shortened when the memory capacity, Eq. 20, is exceeded). If the sorted start meets every
SLO the search stops at once (the paper's early exit, exact only for :math:`B_{max} = 1`, D6);
otherwise it starts from the better of the two (D4: with that start's G).

Loop: at each temperature level (k reset every level, D1) ``iters`` candidates are drawn by one of
three moves chosen uniformly: *squeeze* (a random request of batch k >= 1 into batch k-1 if it has
room), *delay* (a random request into batch k+1 if it has room, or into a new last batch), *swap*
(two requests of different batches trade places). A better candidate is always accepted; a worse
one with the Metropolis probability :math:`\\exp(\\Delta E / T)` (D2), where
:math:`\\Delta E = s\\,(G_{new} - G)/G_{ref}` is the relative change in percent by default (D3,
``energy_scale`` s = 100, :math:`G_{ref}` the start's G). The best solution seen is returned (D3).
Then :math:`T \\leftarrow \\tau T` until :math:`T < T_{thres}`; defaults T0 = 500, T_thres = 20,
iter = 100, tau = 0.95 (63 levels, 6300 evaluations). Every candidate is judged by
:func:`~optsched.problems.gmax.problem.g_core`, the arithmetic of the one evaluator.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from ...budget import NO_LIMIT, TimeBudget
from .problem import GmaxProblem, g_core, g_value

__all__ = [
    "SAParams",
    "SAResult",
    "chunked",
    "inst_assign",
    "iterated_local_search",
    "local_search",
    "simulated_annealing",
    "slo_aware_scheduling",
    "start_points",
]


@dataclass(frozen=True)
class SAParams:
    """Hyper-parameters (paper defaults, Section 5.1)."""

    t0: float = 500.0
    t_thres: float = 20.0
    iters: int = 100
    tau: float = 0.95
    energy_scale: float = 100.0
    seed: int = 0


@dataclass(frozen=True, kw_only=True)
class SAResult:
    """Best schedule found, its (n, t, G), the evaluations spent, whether the early exit fired and
    whether the budget stopped the annealing."""

    batches: list[list[int]]
    n: int
    t: float
    G: float
    evaluations: int
    early_exit: bool
    timed_out: bool = False


#: :func:`local_search` checks its budget every this many neighbours.
DEADLINE_EVERY = 64


def chunked(problem: GmaxProblem, order: Sequence[int]) -> list[list[int]]:
    """Cut an order into consecutive batches of :math:`B_{max}`, closing a batch early when the
    next request would exceed the memory capacity (docs/gmax.md, D8)."""
    batches: list[list[int]] = []
    for i in order:
        if batches and problem.fits(batches[-1] + [i]):
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


def start_points(problem: GmaxProblem) -> tuple[list[list[int]], list[list[int]]]:
    """The two starts: (sorted by predicted e2e at :math:`B_{max}`, input order), both chunked."""
    col = problem.max_batch_size - 1
    by_e2e = sorted(range(problem.n_requests), key=lambda i: (problem.times.exec[i, col], i))
    return chunked(problem, by_e2e), chunked(problem, range(problem.n_requests))


def _squeeze(problem: GmaxProblem, cur: list[list[int]], rng: random.Random) -> list[list[int]] | None:
    movable = [(k, j) for k in range(1, len(cur)) for j in range(len(cur[k]))]
    if not movable:
        return None
    k, j = rng.choice(movable)
    r = cur[k][j]
    if not problem.fits(cur[k - 1] + [r]):
        return None
    new = [list(b) for b in cur]
    new[k - 1].append(r)
    del new[k][j]
    return [b for b in new if b]


def _delay(problem: GmaxProblem, cur: list[list[int]], rng: random.Random) -> list[list[int]] | None:
    k, j = rng.choice([(k, j) for k in range(len(cur)) for j in range(len(cur[k]))])
    r = cur[k][j]
    new = [list(b) for b in cur]
    if k + 1 < len(cur):
        if not problem.fits(cur[k + 1] + [r]):
            return None
        new[k + 1].append(r)
    elif len(cur[k]) > 1:
        new.append([r])
    else:
        return None
    del new[k][j]
    return [b for b in new if b]


def _swap(problem: GmaxProblem, cur: list[list[int]], rng: random.Random) -> list[list[int]] | None:
    if len(cur) < 2:
        return None
    k1, k2 = rng.sample(range(len(cur)), 2)
    j1, j2 = rng.randrange(len(cur[k1])), rng.randrange(len(cur[k2]))
    new = [list(b) for b in cur]
    new[k1][j1], new[k2][j2] = cur[k2][j2], cur[k1][j1]
    if not (problem.fits(new[k1]) and problem.fits(new[k2])):
        return None
    return new


_MOVES = (_squeeze, _delay, _swap)


def simulated_annealing(problem: GmaxProblem, params: SAParams = SAParams(), budget: TimeBudget = NO_LIMIT) -> SAResult:
    """Algorithm 1 with fixes D1-D8 (see the module docstring); seeded by ``params.seed``.

    The annealing stops when ``budget`` expires (checked every
    :data:`DEADLINE_EVERY` moves) with the best schedule found so far (``timed_out``).
    """
    rng = random.Random(params.seed)
    sorted_start, input_start = start_points(problem)
    n_s, t_s = g_core(problem, sorted_start)
    if n_s == problem.n_requests:
        return SAResult(batches=sorted_start, n=n_s, t=t_s, G=g_value(n_s, t_s), evaluations=1, early_exit=True)
    n_i, t_i = g_core(problem, input_start)
    cur, (n_c, t_c) = (sorted_start, (n_s, t_s))
    if g_value(n_i, t_i) > g_value(n_s, t_s):
        cur, (n_c, t_c) = input_start, (n_i, t_i)
    f_cur = g_value(n_c, t_c)
    f_ref = max(f_cur, 1.0 / t_c)
    best, n_b, t_b, f_best = cur, n_c, t_c, f_cur
    evaluations, temp = 2, params.t0
    while temp >= params.t_thres:
        for move in range(params.iters):
            if move % DEADLINE_EVERY == 0 and budget.expired():
                return SAResult(
                    batches=best, n=n_b, t=t_b, G=f_best, evaluations=evaluations, early_exit=False, timed_out=True
                )
            cand = rng.choice(_MOVES)(problem, cur, rng)
            if cand is None:
                continue
            n_new, t_new = g_core(problem, cand)
            evaluations += 1
            f_new = g_value(n_new, t_new)
            delta = params.energy_scale * (f_new - f_cur) / f_ref
            if f_new > f_cur or rng.random() < math.exp(delta / temp):
                cur, f_cur = cand, f_new
                if f_new > f_best:
                    best, n_b, t_b, f_best = cand, n_new, t_new, f_new
        temp *= params.tau
    return SAResult(batches=best, n=n_b, t=t_b, G=f_best, evaluations=evaluations, early_exit=False)


def _neighbours(problem: GmaxProblem, cur: list[list[int]]):
    """Every schedule one move away: a request moved into another batch or into a new batch at any
    place, two requests of different batches exchanged, or one batch moved to another place."""
    m = len(cur)
    for a in range(m):
        for j, r in enumerate(cur[a]):
            rest = [list(b) for b in cur]
            del rest[a][j]
            for b in range(m):
                if b != a and problem.fits(cur[b] + [r]):
                    new = [list(x) for x in rest]
                    new[b].append(r)
                    yield [x for x in new if x]
            if len(cur[a]) > 1:
                for place in range(m + 1):
                    yield rest[:place] + [[r]] + rest[place:]
    for a in range(m):
        for b in range(a + 1, m):
            for ja, ra in enumerate(cur[a]):
                for jb, rb in enumerate(cur[b]):
                    new = [list(x) for x in cur]
                    new[a][ja], new[b][jb] = rb, ra
                    if problem.fits(new[a]) and problem.fits(new[b]):
                        yield new
    for a in range(m):
        for place in range(m):
            if place != a:
                rest = cur[:a] + cur[a + 1 :]
                yield rest[:place] + [cur[a]] + rest[place:]


def local_search(problem: GmaxProblem, batches: list[list[int]], budget: TimeBudget = NO_LIMIT) -> list[list[int]]:
    """Steepest-ascent hill climbing of G from ``batches`` over :func:`_neighbours` (a polishing
    step for the exact solver's first incumbent; not part of the paper's algorithm). After
    ``budget`` has expired it stops within ``DEADLINE_EVERY`` neighbours and
    returns the best schedule seen (one ascent step evaluates O(N^2) neighbours: 1.7 s at N = 70)."""
    cur = [list(b) for b in batches]
    n, t = g_core(problem, cur)
    best = g_value(n, t)
    while True:
        top, top_g = None, best
        for count, cand in enumerate(_neighbours(problem, cur)):
            if count % DEADLINE_EVERY == 0 and budget.expired():
                return cur if top is None else top
            g = g_value(*g_core(problem, cand))
            if g > top_g * (1 + 1e-12):
                top, top_g = cand, g
        if top is None:
            return cur
        cur, best = top, top_g


def iterated_local_search(
    problem: GmaxProblem,
    batches: list[list[int]],
    rounds: int = 20,
    kicks: int = 3,
    seed: int = 0,
    budget: TimeBudget = NO_LIMIT,
) -> list[list[int]]:
    """:func:`local_search` restarted ``rounds`` times from the best schedule after ``kicks`` random
    annealing moves; keeps the best (a polishing step for the exact solver's first incumbent). No
    round starts once ``budget`` has expired."""
    rng = random.Random(seed)
    best = local_search(problem, batches, budget)
    best_g = g_value(*g_core(problem, best))
    for _ in range(rounds):
        if budget.expired():
            break
        cand = best
        for _ in range(kicks):
            cand = rng.choice(_MOVES)(problem, cand, rng) or cand
        cand = local_search(problem, cand, budget)
        g = g_value(*g_core(problem, cand))
        if g > best_g:
            best, best_g = cand, g
    return best


def inst_assign(problem: GmaxProblem, capacities: Sequence[float]) -> list[list[int]]:
    """Algorithm 2's instance pre-assignment (Section 4.4; docs/gmax.md, Algorithm 2, items 21-22).

    Requests, in input order, go to the instance with the largest remaining token capacity
    (Eq. 20; ties to the lowest index); when even that one cannot hold the next request, every
    instance's capacity is reset (a new round starts).

    Parameters
    ----------
    capacities
        Initial token capacity :math:`token\\_num(M_k)` of each instance.

    Raises
    ------
    ValueError
        When a request needs more tokens than a fresh instance holds.
    """
    remaining = list(capacities)
    parts: list[list[int]] = [[] for _ in capacities]
    for i in range(problem.n_requests):
        need = problem.need[i]
        k = max(range(len(remaining)), key=lambda w: (remaining[w], -w))
        if remaining[k] < need:
            remaining = list(capacities)
            k = max(range(len(remaining)), key=lambda w: (remaining[w], -w))
            if remaining[k] < need:
                raise ValueError(f"request {problem.ids[i]!r} needs {need} tokens, more than any instance holds")
        parts[k].append(i)
        remaining[k] -= need
    return parts


def slo_aware_scheduling(
    problem: GmaxProblem, capacities: Sequence[float], params: SAParams = SAParams()
) -> tuple[list[list[list[int]]], int, float]:
    """Algorithm 2: pre-assign requests to instances (:func:`inst_assign`), then run the annealing
    independently per instance (each instance serves its batches from time 0, in parallel).

    Returns
    -------
    (per-instance ordered batches of request indices of ``problem``, total n, total t)
    """
    schedules, n_total, t_total = [], 0, 0.0
    for part in inst_assign(problem, capacities):
        if not part:
            schedules.append([])
            continue
        sub = problem.subset(part)
        res = simulated_annealing(sub, params)
        schedules.append([[part[i] for i in batch] for batch in res.batches])
        n_total += res.n
        t_total += res.t
    return schedules, n_total, t_total
