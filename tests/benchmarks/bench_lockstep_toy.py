"""Benchmark: the least mean latency of equal jobs on a batch machine, against lockstep groups and a
per-job bound.

Run on demand (not collected by pytest):

    python tests/benchmarks/bench_lockstep_toy.py [N O a c ...]

The toy model behind the latency bounds' weak side: N jobs, all at time 0, each needing O steps in
distinct batches; a batch of n jobs takes a + c n. The exact least sum of completion times is found
by dynamic programming over the multiset of remaining steps, each batch serving the n jobs with the
fewest steps left (an exchange argument: serving a job with more steps left instead never helps;
the same values as a search over every subset on N <= 6, O <= 5), for every n. Printed beside it,
per job: the best schedule of lockstep groups (g jobs run together to the end, then the next g; g
dividing N) and the per-job bound O (a + c k) on the k-th completion (the k first finishers need
k O items in at least O batches), which is what the per-request and pairwise bounds of optsched
amount to on this model, and the programme of ``phase-latency`` (:mod:`optsched.phase_latency`,
:func:`~optsched.phase_latency.least_finish_sum`), which couples the jobs that run together.
"""

from __future__ import annotations

import functools
import math
import sys

import numpy as np

from optsched.phase_latency import least_finish_sum


def least_sum(N: int, O: int, a: float, c: float) -> float:
    """The least sum of completion times (dynamic programming, module docstring)."""

    @functools.cache
    def best(left: tuple[int, ...]) -> float:
        if not left:
            return 0.0
        found = math.inf
        for n in range(1, len(left) + 1):
            after = tuple(sorted(x for x in [s - 1 for s in left[:n]] + list(left[n:]) if x > 0))
            found = min(found, (a + c * n) * len(left) + best(after))
        return found

    return best(tuple([O] * N))


def lockstep_groups(N: int, O: int, a: float, c: float) -> float:
    """The least sum of completion times over lockstep groups of g jobs, g dividing N."""
    return min(sum((a + c * g) * O * g * (k + 1) for k in range(N // g)) for g in range(1, N + 1) if N % g == 0)


def per_job_bound(N: int, O: int, a: float, c: float) -> float:
    """sum_k O (a + c k): the k-th completion needs k O items in at least O batches."""
    return O * (N * a + c * N * (N + 1) / 2)


def main(argv: list[str]) -> None:
    cases = [tuple(argv[k : k + 4]) for k in range(0, len(argv), 4)] or [
        ("8", "8", "1", "0.3"),
        ("10", "10", "1", "0.1"),
        ("12", "8", "1", "0.05"),
        ("12", "8", "1", "0.3"),
    ]
    print("N   O   a     c      optimum  groups   bound    below    phase    below")
    for case in cases:
        N, O, a, c = int(case[0]), int(case[1]), float(case[2]), float(case[3])
        opt, grp, low = least_sum(N, O, a, c) / N, lockstep_groups(N, O, a, c) / N, per_job_bound(N, O, a, c) / N
        zero = np.zeros(N)
        phase = least_finish_sum(np.full(N, float(O)), zero, zero, a, c, 60.0) / N
        below = [100 * (opt - x) / opt for x in (low, phase)]
        head = f"{N:<3d} {O:<3d} {a:<5g} {c:<6g} {opt:8.3f} {grp:8.3f}"
        print(f"{head} {low:8.3f} {below[0]:6.1f} % {phase:8.3f} {below[1]:6.1f} %")


if __name__ == "__main__":
    main(sys.argv[1:])
