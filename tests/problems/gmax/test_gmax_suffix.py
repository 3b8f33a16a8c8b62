"""G-maximisation's suffix bound (gmax/suffix.py): the grid programme bounds the continuous one, its
grid value is the programme's, the restricted bound is the best pseudo-schedule and bounds every completion."""

import math

import numpy as np
import pytest

from optsched.problems.gmax.problem import g_core, g_value
from tests.support.gmax import prefix_node, small_instance
from tests.support.static_exhaustive import exhaustive_g, ordered_partitions


def best_pseudo_suffix(p, lam, pi, q, start):
    """Brute force: the largest value - pi . a of a pseudo-schedule filling the positions after q
    from ``start`` (batches of distinct requests, a request in any number of batches)."""
    from itertools import combinations

    from optsched.problems.gmax.suffix import on_time

    nreq, e = p.n_requests, p.times.exec
    if q == nreq:
        return 0.0
    best = -math.inf
    for s in range(1, min(p.max_batch_size, nreq - q) + 1):
        for batch in combinations(range(nreq), s):
            dur = max(e[j, s - 1] for j in batch)
            val = sum(on_time(p, j, start, s) - lam * e[j, s - 1] - pi[j] for j in batch) - lam * (nreq - q - s) * dur
            best = max(best, val + best_pseudo_suffix(p, lam, pi, q + s, start + dur))
    return best


@pytest.mark.parametrize("seed", range(8))
def test_grid_programme_bounds_the_continuous_one(seed):
    """V_h(q, cell(S)) >= the best pseudo-suffix from (q, S), by brute force on 4 requests, at
    random starts, multipliers, lambdas and grid steps (the grid lemma of gmax/suffix.py)."""
    from optsched.problems.gmax.suffix import SuffixBound

    rng = np.random.default_rng(seed)
    full = small_instance(seed)
    p = full.subset(list(range(min(4, full.n_requests))))
    g_ex = exhaustive_g(p)[0]
    for step in (0.05, 0.3, 1.1):
        lam, pi = g_ex * rng.uniform(0.3, 1.5), rng.normal(0.0, 0.3, p.n_requests)
        suffix = SuffixBound(p, lam, step)
        suffix.solve(pi)
        for start in rng.uniform(0.0, 1.2 * suffix.cells * suffix.step, 6):
            for q in range(p.n_requests):
                assert suffix.value[q, suffix.cell(start)] >= best_pseudo_suffix(p, lam, pi, q, start) - 1e-9


@pytest.mark.parametrize("seed", range(10))
def test_grid_value_is_the_programmes_value(seed):
    """A column of the column generation (gmax/lagrange.py) carries its grid value: at least its true
    n - lambda t for every pseudo-schedule (brute force over batch sequences of small instances, the
    grid lemma), and for the programme's own path exactly the programme's root value, so that the
    master prices what the programme optimises (the other paths priced with it: never more)."""
    from itertools import combinations

    from optsched.problems.gmax.suffix import SuffixBound

    rng = np.random.default_rng(seed)
    full = small_instance(seed)
    p = full.subset(list(range(min(4, full.n_requests))))
    nreq, bmax = p.n_requests, p.max_batch_size
    batches = [list(b) for s in range(1, bmax + 1) for b in combinations(range(nreq), s)]
    g_ex = exhaustive_g(p)[0]
    for step in (0.05, 0.3, 1.1):
        lam, pi = g_ex * rng.uniform(0.3, 1.5), rng.normal(0.0, 0.3, nreq)
        suffix = SuffixBound(p, lam, step)
        root = suffix.solve(pi)
        paths = suffix.paths(5)
        value, counts = suffix.grid_value(paths[0])
        assert value - pi @ counts + pi.sum() == pytest.approx(root, abs=1e-9)
        for path in paths:  # the other priced columns: pseudo-schedules, none above the optimum
            assert sum(map(len, path)) == nreq and all(len(set(b)) == len(b) for b in path)
            value, counts = suffix.grid_value(path)
            assert value - pi @ counts + pi.sum() <= root + 1e-9
        for _ in range(60):  # random pseudo-schedules: sizes summing to N, repeats allowed
            seq, q = [], 0
            while q < nreq:
                fitting = [b for b in batches if len(b) <= nreq - q]
                seq.append(fitting[rng.integers(len(fitting))])
                q += len(seq[-1])
            n, t = g_core(p, seq)
            assert suffix.grid_value(seq)[0] >= n - lam * t - 1e-9


@pytest.mark.parametrize("seed", range(12))
def test_search_restricted_bound_bounds_every_completion(seed):
    """The bound over the remaining requests only (gmax/suffix.py, ``SuffixBound.restricted``, which
    the search applies to every node it expands) is at least the best n - lambda t of the schedules
    that complete the node, for prefixes of one and two batches (brute force over ordered set
    partitions; three grids, random multipliers)."""
    from optsched.problems.gmax.suffix import SuffixBound

    p = small_instance(seed)
    rng = np.random.default_rng(seed)
    schedules = list(ordered_partitions(p))
    lam = max(float(np.median([g_value(*g_core(p, s)) for s in schedules])), 1e-3)
    emin = p.times.exec.min(axis=1)
    best: dict[tuple, float] = {}
    for s in schedules:
        n, t = g_core(p, s)
        for k in (1, 2):
            if len(s) > k:
                key = tuple(tuple(b) for b in s[:k])
                best[key] = max(best.get(key, -math.inf), n - lam * t)
    for step in (0.005, 0.4, 1.0):
        suffix = SuffixBound(p, lam, step)
        suffix.pi = rng.normal(0.0, 0.5, p.n_requests)
        for key, value in best.items():
            node = prefix_node(p, [list(b) for b in key], suffix.pi, emin)
            member = np.array([node[2] >> j & 1 for j in range(p.n_requests)], dtype=np.uint8)
            bound = node[5] - lam * node[6] + node[7] + suffix.restricted(member, node[3], node[4])
            assert bound >= value - 1e-9, (step, key)


def _pseudo_schedule_values(suffix, rest: list[int], q: int, cell: int) -> list[float]:
    """Brute force: the grid value (gmax/lagrange.py module docstring, SuffixBound.grid_value) of every
    pseudo-schedule of the requests ``rest`` (batches of distinct requests, a request in any number of
    batches) filling the positions after q from grid cell ``cell``."""
    from itertools import combinations

    nreq, bmax = suffix.problem.n_requests, suffix.problem.max_batch_size
    out = []

    def walk(q: int, g: int, acc: float) -> None:
        if q == nreq:
            out.append(acc)
            return
        for s in range(1, min(bmax, nreq - q) + 1):
            for batch in combinations(rest, s):
                rows = suffix.rank[s - 1][list(batch)]
                lead = int(rows.max())
                value = float(
                    (
                        suffix.ontime[s - 1][rows, g] - suffix.lam * suffix.dur[s - 1][rows] - suffix.pi[list(batch)]
                    ).sum()
                )
                value -= suffix.lam * (nreq - q - s) * suffix.dur[s - 1][lead]
                step = int(suffix.steps(suffix.dur[s - 1][lead : lead + 1])[0])
                walk(q + s, min(g + step, suffix.cells - 1), acc + value)

    walk(q, cell, 0.0)
    return out


@pytest.mark.parametrize("seed", range(12))
def test_search_restricted_bound_is_the_best_pseudo_schedule(seed):
    """The bound over the remaining requests (``SuffixBound.restricted``) is exactly the best grid
    value of the pseudo-schedules of those requests from the node's cell (brute force; nodes with at
    most four requests left, three grids, random multipliers), so it reads no cell too late."""
    from optsched.problems.gmax.suffix import SuffixBound

    p = small_instance(seed)
    rng = np.random.default_rng(seed)
    nodes = {
        tuple(tuple(b) for b in s[:k])
        for s in ordered_partitions(p)
        for k in (1, 2, 3)
        if k < len(s) and p.n_requests - sum(len(b) for b in s[:k]) <= 4
    }
    lam = 0.05 + 0.1 * rng.random()
    for step in (0.005, 0.4, 1.0):
        suffix = SuffixBound(p, lam, step)
        suffix.pi = rng.normal(0.0, 0.5, p.n_requests)
        for key in sorted(nodes)[:40]:
            node = prefix_node(p, [list(b) for b in key], suffix.pi, p.times.exec.min(axis=1))
            rest = [j for j in range(p.n_requests) if node[2] >> j & 1]
            member = np.array([node[2] >> j & 1 for j in range(p.n_requests)], dtype=np.uint8)
            brute = max(_pseudo_schedule_values(suffix, rest, node[3], suffix.cell(node[4])))
            assert suffix.restricted(member, node[3], node[4]) == pytest.approx(brute, abs=1e-9), (step, key)
