"""G-maximisation's Lagrangian bound (gmax/lagrange.py): the bound holds for every schedule and
prefix, a refuted lambda bounds every completion of the open nodes, no time left builds nothing."""

import math

import numpy as np
import pytest

from optsched.budget import NO_LIMIT, TimeBudget
from optsched.instance import parse_instance
from optsched.problems.gmax.problem import GmaxProblem, g_core, g_value
from tests.support.gmax import small_instance
from tests.support.gmax_generate import random_gmax_instance
from tests.support.static_exhaustive import exhaustive_g, ordered_partitions


def prefix_values(p, batches, lam):
    """(q, start, n - lam t of the prefix, remaining set) after each prefix of ``batches``
    (the decomposition of t in the docstring of gmax/suffix.py)."""
    from optsched.problems.gmax.suffix import on_time

    nreq, e = p.n_requests, p.times.exec
    q, start, acc, rest = 0, 0.0, 0.0, set(range(nreq))
    out = [(q, start, acc, frozenset(rest))]
    for b in batches:
        s, dur = len(b), max(e[j, len(b) - 1] for j in b)
        acc += sum(on_time(p, j, start, s) - lam * e[j, s - 1] for j in b) - lam * (nreq - q - s) * dur
        q, start, rest = q + s, start + dur, rest - set(b)
        out.append((q, start, acc, frozenset(rest)))
    return out


def lagrangian_bound_violations(p, lam, pi, step, schedules):
    """Prefixes of ``schedules`` of p whose completion beats the Lagrangian node bound."""
    from optsched.problems.gmax.suffix import SuffixBound

    suffix = SuffixBound(p, lam, step)
    suffix.solve(pi)
    bad = []
    for batches in schedules:
        n, t = g_core(p, batches)
        for q, start, acc, rest in prefix_values(p, batches, lam):
            ub = acc + sum(pi[j] for j in rest) + suffix.value[q, suffix.cell(start)]
            if n - lam * t > ub + 1e-9:
                bad.append((batches, q))
    return bad


@pytest.mark.parametrize("seed", range(12))
def test_lagrangian_bound_holds_for_every_schedule_and_prefix(seed):
    """For random multipliers, lambdas and grid steps (coarse ones stress the rounding), the node
    bound of gmax/suffix.py is at least n - lambda t of every completion of every prefix of every
    schedule (a random 400 where an instance has more); the multipliers of the column generation
    give a root bound no smaller than the optimum's 0."""
    from optsched.problems.gmax.lagrange import lagrangian_multipliers

    p = small_instance(seed)
    rng = np.random.default_rng(seed)
    g_ex, best, _ = exhaustive_g(p)
    schedules = list(ordered_partitions(p))
    if len(schedules) > 400:
        schedules = [schedules[k] for k in rng.choice(len(schedules), size=400, replace=False)]
    for lam, step in ((0.5 * g_ex, 0.7), (g_ex, 0.1), (1.5 * g_ex, 0.005)):
        pi = rng.normal(0.0, 0.5, p.n_requests)
        assert lagrangian_bound_violations(p, lam, pi, step, schedules) == []
    pi, root, master, _, _ = lagrangian_multipliers(p, g_ex, [best], 0.01, NO_LIMIT)
    assert master <= root + 1e-9 and root >= -1e-9  # the optimum has n - G* t = 0
    assert lagrangian_bound_violations(p, g_ex, pi, 0.01, schedules) == []


def search_node(p, prefix, pi):
    """The search's node tuple of gmax/bnb.py for a prefix of batches (only the fields the final
    bound reads are exact: q, start, n, t and the multipliers of the remaining requests)."""
    from optsched.problems.gmax.suffix import on_time

    nreq, e = p.n_requests, p.times.exec
    q, start, n, t, rest = 0, 0.0, 0, 0.0, set(range(nreq))
    for b in prefix:
        s, dur = len(b), max(e[j, len(b) - 1] for j in b)
        n += sum(on_time(p, j, start, s) for j in b)
        t += sum(e[j, s - 1] for j in b) + (nreq - q - s) * dur
        q, start, rest = q + s, start + dur, rest - set(b)
    return (0.0, 0.0, sum(1 << j for j in rest), q, start, n, t, float(sum(pi[j] for j in rest)), 0.0, None)


@pytest.mark.parametrize("seed", range(10))
def test_refuted_lambda_bounds_every_completion_of_the_open_nodes(seed):
    """The bisection of the final bound (gmax/lagrange.py, "Final bound at a time limit"): for single
    open nodes (every prefix of a few schedules, the empty one included) and for the set of all of
    them, random and column-generation multipliers and coarse and fine grids, the returned lambda
    plus EPS / t is at least the G of every completion of every node (brute force). The bisection
    starts at 0 so that a wrong test would let it fall below the best completion."""
    from optsched.problems.gmax.bnb import EPS
    from optsched.problems.gmax.lagrange import lagrangian_multipliers, refuted_lambda

    p = small_instance(seed)
    rng = np.random.default_rng(seed)
    g_ex, best, _ = exhaustive_g(p)
    schedules = list(ordered_partitions(p))
    picks = [best] + [schedules[k] for k in rng.choice(len(schedules), size=min(3, len(schedules)), replace=False)]
    prefixes = {tuple(map(tuple, s[:k])) for s in picks for k in range(len(s))}
    pi_cg = lagrangian_multipliers(p, g_ex, [best], 0.01, NO_LIMIT)[0]
    for pi, step in (
        (pi_cg, 0.01),
        (rng.normal(0.0, 0.5, p.n_requests), 0.7),
        (rng.normal(0.0, 0.5, p.n_requests), 0.005),
    ):
        nodes = {prefix: search_node(p, prefix, pi) for prefix in prefixes}
        for group in [[prefix] for prefix in prefixes] + [list(prefixes)]:
            mu = refuted_lambda(p, pi, [nodes[prefix] for prefix in group], 0.0, 4.0 * g_ex + 1.0, step, NO_LIMIT)
            for s in schedules:
                if any(tuple(map(tuple, s[: len(prefix)])) == prefix for prefix in group):
                    n, t = g_core(p, s)
                    assert g_value(n, t) <= mu + EPS / t + 1e-12, (group, s, mu)


def test_bnb_with_no_time_left_builds_nothing_and_claims_no_bound():
    """branch_and_bound called after its deadline returns its incumbent, ``time_limit`` and an
    infinite bound without building a programme (solve_exact then reports its solver-free bound)."""
    from optsched.problems.gmax.lagrange import branch_and_bound

    p = GmaxProblem.from_instance(parse_instance(random_gmax_instance(12, 0, max_batch_size=4)))
    incumbent = [[j] for j in range(p.n_requests)]
    res = branch_and_bound(p, incumbent, TimeBudget.of(-1.0), 1.0)
    assert (res.status, res.batches, res.bound) == ("time_limit", incumbent, math.inf)
    assert res.G == g_value(*g_core(p, incumbent)) and "root_bound" not in res.info
