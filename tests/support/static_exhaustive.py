"""Exhaustive search over ordered set partitions: the reference optimum of static G-maximisation.

Enumerates every ordered list of batches (each of size <= B_max and within the memory capacity)
and judges it with :func:`optsched.problems.gmax.problem.g_core`, the evaluator's arithmetic.
Within-batch order is irrelevant, so each schedule is visited once (docs/gmax.md, "Exhaustive reference": 120,
450 and 530 schedules for N = 5 and B_max = 1, 2, 3).
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import combinations

from optsched.problems.gmax.problem import GmaxProblem, g_core, g_value


def ordered_partitions(problem: GmaxProblem) -> Iterator[list[list[int]]]:
    """Every valid ordered list of batches of request indices."""

    def rec(remaining: tuple[int, ...]) -> Iterator[list[list[int]]]:
        if not remaining:
            yield []
            return
        for size in range(1, min(problem.max_batch_size, len(remaining)) + 1):
            for batch in combinations(remaining, size):
                if not problem.fits(batch):
                    continue
                rest = tuple(i for i in remaining if i not in batch)
                for tail in rec(rest):
                    yield [list(batch)] + tail

    yield from rec(tuple(range(problem.n_requests)))


def exhaustive_g(problem: GmaxProblem) -> tuple[float, list[list[int]], int]:
    """(best G, a best schedule, number of schedules visited)."""
    best, best_batches, count = -1.0, [], 0
    for batches in ordered_partitions(problem):
        count += 1
        g = g_value(*g_core(problem, batches))
        if g > best:
            best, best_batches = g, batches
    return best, best_batches, count
