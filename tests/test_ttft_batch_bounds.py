"""The ``block-batch-ttft`` bound on mean TTFT (optsched/ttft_batch_bounds.py).

- the search's answer is at most the optimum of the batch relaxation G found by an exhaustive search
  over every schedule of G on a unit time grid (random integer releases, works, flush lengths and
  least first-token times against which the sorted completions count), which checks the normal form
  of the proof, and equal to it on most instances (the gap children may relax it);
- the search's answer is at least the optimum of the flush relaxation F, and above it somewhere;
- stopped by its budget, the search answers at most the optimum, never the best schedule it found;
- never above the exhaustive TTFT optimum on random tiny instances, with and without arrivals;
- never above any policy's replayed mean TTFT on random loaded instances of 20 to 200 requests;
- a planted invalid variant (flushes twice as long) is caught;
- listed by ``optsched bound --problem infermax --objective ttft`` beside ``block-flush-ttft``.
"""

from __future__ import annotations

import functools
import random

import numpy as np
import pytest

from optsched.ttft_batch_bounds import batch_bound, batch_relaxation_bound, batch_relaxation_optimum
from optsched.ttft_block_bounds import flush_relaxation_optimum
from tests.support.bound_checks import (
    LOADED,
    check_never_above_any_policy,
    check_never_above_the_exhaustive_optimum,
    refutations,
)
from tests.support.ttft_blocks import (
    block_value,
    check_a_cut_search_answers_at_most_the_optimum,
    check_the_bound_command_lists,
)


def grid_optimum(release: list[int], work: list[int], beta: int, due: list[int] | None = None) -> int:
    """The least sum of completions of G over every schedule on the unit grid, the k-th completion
    counted at least the k-th of ``due`` (sorted; default none): out of a segment, each unit of time
    idles or a segment starts (taking the jobs released by then); in one, each unit works one unit of
    a job it took, or idles, or (once it has worked) its flush of ``beta`` units starts."""
    n = len(release)
    floors = sorted(due or [0] * n)
    horizon = max(release) + sum(work) + n * beta  # idling past it only delays every completion

    @functools.cache
    def best(t: int, rem: tuple[int, ...], pending: frozenset[int], seg: tuple[int, bool] | None) -> float:
        if not any(rem) and not pending:
            return 0.0
        out = float("inf")
        if seg is None:
            if t < horizon:
                out = best(t + 1, rem, pending, None)
            if any(rem[j] and release[j] <= t for j in range(n)):
                out = min(out, best(t, rem, pending, (t, False)))
            return out
        if seg[1]:  # flush: the jobs done in the segment complete at t + beta
            done = sum(1 for j in range(n) if not rem[j]) - len(pending)
            paid = sum(max(t + beta, d) for d in floors[done : done + len(pending)])
            out = paid + best(t + beta, rem, frozenset(), None)
        if t < horizon:
            out = min(out, best(t + 1, rem, pending, seg))
        for j in range(n):
            if rem[j] and release[j] <= seg[0]:
                left = rem[:j] + (rem[j] - 1,) + rem[j + 1 :]
                out = min(out, best(t + 1, left, pending | {j} if rem[j] == 1 else pending, (seg[0], True)))
        return out

    return int(best(0, tuple(work), frozenset(), None))


def test_the_search_bounds_an_exhaustive_search_of_the_relaxation() -> None:
    """At most G's optimum (the gap children may relax it), at least F's, equal to G's on most."""
    rng = random.Random(11)
    above = equal = 0
    for _ in range(60):
        n = rng.randint(1, 4)
        release = [rng.randint(0, 6) for _ in range(n)]
        work = [rng.randint(1, 4) for _ in range(n)]
        beta = rng.randint(1, 3)
        r, p = np.array(release, float), np.array(work, float)
        lower, found, exact = batch_relaxation_optimum(r, p, beta)
        assert exact and lower == found
        grid = grid_optimum(release, work, beta)
        assert lower <= grid + 1e-9, (release, work, beta)
        flush = flush_relaxation_optimum(r, p, beta)[0]
        assert lower >= flush - 1e-9
        above += lower > flush + 1e-9
        equal += lower >= grid - 1e-9
        due = [x + rng.randint(0, 8) for x in release]
        lower, found, exact = batch_relaxation_optimum(r, p, beta, due=np.array(due, float))
        assert exact and lower == found
        assert lower <= grid_optimum(release, work, beta, due) + 1e-9, (release, work, beta, due)
    assert above and equal >= 50


def test_a_search_stopped_by_its_budget_answers_at_most_the_optimum() -> None:
    drawn = check_a_cut_search_answers_at_most_the_optimum(batch_relaxation_optimum, random.Random(5), 12, 10)
    for release, work, beta, optimum_g in drawn:
        assert batch_relaxation_bound(release, work, release, beta)[0] == pytest.approx(optimum_g, rel=1e-12)


def batch_value(inst, overhead_scale: float = 1.0) -> float:
    """The bound with flushes ``overhead_scale`` batch overheads long (1: the proven bound; more: a
    planted, invalid one)."""
    return block_value(inst, overhead_scale, batch_relaxation_bound)


@pytest.mark.parametrize("arrivals", [False, True])
def test_never_above_the_exhaustive_optimum(arrivals: bool) -> None:
    check_never_above_the_exhaustive_optimum(lambda inst: batch_bound(inst).value, batch_value, "ttft", arrivals)


@pytest.mark.parametrize("n, seed", LOADED)
def test_never_above_any_policy(n: int, seed: int) -> None:
    check_never_above_any_policy(lambda inst: batch_bound(inst).value, "ttft", n, seed)


def test_a_planted_invalid_variant_is_caught() -> None:
    """Flushes of two batch overheads: above the exhaustive optimum of some tiny instance, or above
    some policy's mean TTFT on a loaded one."""
    assert refutations(lambda inst: batch_value(inst, 2.0), "ttft")


def test_the_bound_command_lists_it(capsys) -> None:
    found = check_the_bound_command_lists(capsys, "block-batch-ttft", "ttft_batch_bounds")
    assert "block-flush-ttft" in found
