"""The ``block-flush-ttft`` bound on mean TTFT (optsched/ttft_block_bounds.py).

- the search's optimum of the flush relaxation F equals an exhaustive search over every schedule of
  F on a unit time grid (random integer releases, works and flush lengths), which also checks the
  normal form of the proof (SRPT work, flushes only at work completions);
- stopped by its budget, the search answers at most the optimum (its least open node), never the
  best schedule it found, which is above the optimum somewhere;
- never above the exhaustive TTFT optimum on random tiny instances, with and without arrivals;
- never above any policy's replayed mean TTFT on random loaded instances of 20 to 200 requests;
- a planted invalid variant (flushes twice as long) is caught by those checks;
- listed by ``optsched bound --problem infermax --objective ttft``;
- pruning dominated nodes (:class:`~optsched.ttft_block_bounds.DominanceTable`) changes no optimum
  of F nor of G (``block-batch-ttft``'s search) on crowded instances, a planted table that ignores
  the node's moment changes some, and the table's rule is checked state by state.
"""

from __future__ import annotations

import functools
import random

import numpy as np
import pytest

from optsched import ttft_block_bounds
from optsched.ttft_batch_bounds import batch_relaxation_optimum
from optsched.ttft_block_bounds import block_bound, flush_relaxation_optimum
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


def grid_optimum(release: list[int], work: list[int], beta: int) -> int:
    """The least sum of completions of F over every schedule on the unit grid: each unit of time
    works one unit of a released job, idles, or is part of a flush of ``beta`` units started then."""
    n = len(release)
    horizon = max(release) + sum(work) + n * beta  # idling past it only delays every completion

    @functools.cache
    def best(t: int, rem: tuple[int, ...], pending: frozenset[int]) -> float:
        if not any(rem) and not pending:
            return 0.0
        out = float("inf")
        if pending:  # flush: the jobs done so far complete at t + beta
            out = len(pending) * (t + beta) + best(t + beta, rem, frozenset())
        if t < horizon:  # idle one unit
            out = min(out, best(t + 1, rem, pending))
        for j in range(n):
            if rem[j] and release[j] <= t:
                left = rem[:j] + (rem[j] - 1,) + rem[j + 1 :]
                out = min(out, best(t + 1, left, pending | {j} if rem[j] == 1 else pending))
        return out

    return int(best(0, tuple(work), frozenset()))


def test_the_search_equals_an_exhaustive_search_of_the_relaxation() -> None:
    rng = random.Random(7)
    for _ in range(60):
        n = rng.randint(1, 4)
        release = [rng.randint(0, 6) for _ in range(n)]
        work = [rng.randint(1, 3) for _ in range(n)]
        beta = rng.randint(1, 3)
        lower, found, exact = flush_relaxation_optimum(np.array(release, float), np.array(work, float), beta)
        assert exact and lower == found
        assert lower == pytest.approx(grid_optimum(release, work, beta), abs=1e-9), (release, work, beta)


def test_a_search_stopped_by_its_budget_answers_at_most_the_optimum() -> None:
    """Cut after a few nodes, the search answers the least open node's bound, at most the optimum;
    the best schedule it found is above the optimum somewhere (a planted variant answering it would
    not be a bound)."""
    check_a_cut_search_answers_at_most_the_optimum(flush_relaxation_optimum, random.Random(3), 20, 16)


@pytest.mark.parametrize("arrivals", [False, True])
def test_never_above_the_exhaustive_optimum(arrivals: bool) -> None:
    check_never_above_the_exhaustive_optimum(lambda inst: block_bound(inst).value, block_value, "ttft", arrivals)


@pytest.mark.parametrize("n, seed", LOADED)
def test_never_above_any_policy(n: int, seed: int) -> None:
    check_never_above_any_policy(lambda inst: block_bound(inst).value, "ttft", n, seed)


def test_a_planted_invalid_variant_is_caught() -> None:
    """Flushes of two batch overheads: above the exhaustive optimum of some tiny instance, or
    above some policy's mean TTFT on a loaded one."""
    assert refutations(lambda inst: block_value(inst, 2.0), "ttft")


def test_the_bound_command_lists_it(capsys) -> None:
    check_the_bound_command_lists(capsys, "block-flush-ttft", "ttft_block_bounds")


def _optima(rng: random.Random, count: int) -> list[float]:
    """F's and G's optimum with the least first-token times of ``count`` random instances of 5 to 8 jobs
    whose releases crowd, so that branches reach the same jobs done by different paths."""
    out = []
    for _ in range(count):
        n = rng.randint(5, 8)
        release = np.array([rng.randint(0, 8) for _ in range(n)], float)
        work = np.array([rng.randint(1, 6) for _ in range(n)], float)
        beta = float(rng.randint(1, 3))
        due = release + np.array([rng.randint(0, 9) for _ in range(n)], float)
        flush_low, flush_found, flush_exact = flush_relaxation_optimum(release, work, beta)
        low, found, exact = batch_relaxation_optimum(release, work, beta, due=due)
        assert flush_exact and exact and flush_low == flush_found and low == found
        out += [flush_low, low]
    return out


def test_pruning_dominated_nodes_changes_no_optimum(monkeypatch) -> None:
    """Both searches end at the same optima with and without the dominance table (``DOMINANCE_KEPT`` 0
    keeps no state, so nothing is pruned by it)."""
    pruned = _optima(random.Random(23), 40)
    monkeypatch.setattr(ttft_block_bounds, "DOMINANCE_KEPT", 0)
    assert pruned == pytest.approx(_optima(random.Random(23), 40), rel=1e-12, abs=1e-12)


def test_a_planted_dominance_that_ignores_the_moment_is_caught(monkeypatch) -> None:
    """A table that calls a node dominated by an earlier one at a later moment changes some optimum."""
    honest = _optima(random.Random(23), 40)

    def careless(self, key, t, rem, cost):  # noqa: ANN001, ANN202 - planted fault
        kept = self.states.setdefault(key, [])
        if any(c <= cost and all(a <= b for a, b in zip(r, rem)) for _, r, c in kept):
            return True
        kept.append((t, tuple(rem), cost))
        return False

    monkeypatch.setattr(ttft_block_bounds.DominanceTable, "dominated", careless)
    assert _optima(random.Random(23), 40) != pytest.approx(honest, rel=1e-12, abs=1e-12)


def test_a_node_no_better_than_an_expanded_one_is_dominated() -> None:
    table = ttft_block_bounds.DominanceTable()
    assert not table.dominated((3, 2), 5.0, [1.0, 4.0], 10.0)
    assert table.dominated((3, 2), 5.0, [1.0, 4.0], 10.0)  # the same state
    assert table.dominated((3, 2), 6.0, [2.0, 4.0], 11.0)  # later, more work, dearer
    assert not table.dominated((3, 2), 4.0, [2.0, 4.0], 11.0)  # earlier
    assert not table.dominated((3, 2), 6.0, [0.5, 4.0], 11.0)  # less work on one job
    assert not table.dominated((3, 2), 6.0, [2.0, 4.0], 9.0)  # cheaper so far
    assert not table.dominated((4, 2), 6.0, [2.0, 4.0], 11.0)  # other jobs released
