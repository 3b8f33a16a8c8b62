"""The ``block-flush-ttft`` bound on mean TTFT (optsched/ttft_block_bounds.py).

- the search's optimum of the flush relaxation F equals an exhaustive search over every schedule of
  F on a unit time grid (random integer releases, works and flush lengths), which also checks the
  normal form of the proof (SRPT work, flushes only at work completions);
- stopped by its budget, the search answers at most the optimum (its least open node), never the
  best schedule it found, which is above the optimum somewhere;
- never above the exhaustive TTFT optimum on random tiny instances, with and without arrivals;
- never above any policy's replayed mean TTFT on random loaded instances of 20 to 200 requests;
- a planted invalid variant (flushes twice as long) is caught by those checks;
- listed by ``optsched bound --problem infermax --objective ttft``.
"""

from __future__ import annotations

import functools
import json
import math
import random

import numpy as np
import pytest

from optsched.bounds import prefill_alone_time
from optsched.budget import TimeBudget
from optsched.load_bounds import share_terms
from optsched.ttft_block_bounds import (
    BLOCK_TIME,
    block_bound,
    block_mean_bound,
    flush_relaxation_optimum,
    srpt_prefill_works,
)
from optsched.ttft_bounds import flush_overhead
from tests.support.infermax import tiny_instance
from tests.test_load_bounds import TINY, loaded_instance, optimum, policy_values, ttft_refutations


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


def random_jobs(rng: random.Random, n: int) -> tuple[np.ndarray, np.ndarray, float]:
    release = np.cumsum([rng.expovariate(1.0) for _ in range(n)])
    work = np.array([rng.uniform(0.05, 1.5) for _ in range(n)])
    return release, work, rng.uniform(0.1, 0.6)


class NodeBudget:
    """A budget that expires after ``nodes`` looks at it (the search looks once a node): a cut at a
    chosen point of the search, the same on every machine."""

    def __init__(self, nodes: int) -> None:
        self.nodes = nodes

    def expired(self) -> bool:
        self.nodes -= 1
        return self.nodes < 0


def test_a_search_stopped_by_its_budget_answers_at_most_the_optimum() -> None:
    """Cut after a few nodes, the search answers the least open node's bound, at most the optimum;
    the best schedule it found is above the optimum somewhere (a planted variant answering it would
    not be a bound)."""
    rng = random.Random(3)
    cut = above = 0
    for _ in range(20):
        release, work, beta = random_jobs(rng, 16)
        optimum_f, _, exact = flush_relaxation_optimum(release, work, beta)
        assert exact
        for nodes in (3, 10, 40):
            lower, found, done = flush_relaxation_optimum(release, work, beta, NodeBudget(nodes))
            assert lower <= optimum_f * (1 + 1e-12) and found >= optimum_f * (1 - 1e-12)
            cut += not done
            above += math.isfinite(found) and found > optimum_f * (1 + 1e-9)
    assert cut and above


def block_value(inst, overhead_scale: float = 1.0, solver=None) -> float:
    """The block bound with flushes ``overhead_scale`` batch overheads long (1: the proven bound;
    more: a planted, invalid one), each block solved by ``solver`` (default: relaxation F's search)."""
    release = np.array([r.arrival for r in inst.requests], dtype=np.float64)
    alone = np.array([prefill_alone_time(inst, r.prompt_tokens) for r in inst.requests])
    work = share_terms(inst, True)[:, 0]
    beta = overhead_scale * flush_overhead(inst)
    budget, shares = TimeBudget.of(BLOCK_TIME), srpt_prefill_works(inst)
    return block_mean_bound(release, work, alone, beta, budget, shares, solver)[0]


def check_never_above_the_exhaustive_optimum(bound_of, value_of, arrivals: bool) -> None:
    """On the tiny instances, the listed bound ``bound_of(inst)`` equals ``value_of(inst)`` and is at
    most the exhaustive mean-TTFT optimum."""
    for seed in TINY:
        inst = tiny_instance(seed, arrivals=arrivals)
        value = bound_of(inst).value
        assert value == pytest.approx(value_of(inst), rel=1e-12)
        assert value <= optimum(inst, "ttft") * (1 + 1e-9), (seed, value)


#: (n, seed) of the loaded instances every block bound is checked against every policy on.
LOADED = [(20, 1), (50, 2), (120, 3), (200, 4), (80, 5), (30, 6)]


def check_never_above_any_policy(bound_of, n: int, seed: int) -> None:
    """On a loaded instance, the listed bound is positive and at most every policy's mean TTFT."""
    inst = loaded_instance(n, seed)
    least = min(policy_values(inst, "ttft").values())
    assert 0.0 < bound_of(inst).value <= least * (1 + 1e-9)


@pytest.mark.parametrize("arrivals", [False, True])
def test_never_above_the_exhaustive_optimum(arrivals: bool) -> None:
    check_never_above_the_exhaustive_optimum(block_bound, block_value, arrivals)


@pytest.mark.parametrize("n, seed", LOADED)
def test_never_above_any_policy(n: int, seed: int) -> None:
    check_never_above_any_policy(block_bound, n, seed)


def test_a_planted_invalid_variant_is_caught() -> None:
    """Flushes of two batch overheads: above the exhaustive optimum of some tiny instance, or
    above some policy's mean TTFT on a loaded one."""
    assert ttft_refutations(lambda inst: block_value(inst, 2.0))


def test_the_bound_command_lists_it(capsys) -> None:
    from optsched.cli import main

    assert main(["bound", "toy-4", "--problem", "infermax", "--objective", "ttft", "--json"]) == 0
    found = {b["name"]: b for b in json.loads(capsys.readouterr().out)["bounds"]}
    block = found["block-flush-ttft"]
    assert block["valid"] and block["value"] >= found["srpt-prefill-flush"]["value"] * (1 - 1e-9)
    assert "ttft_block_bounds" in block["note"]
    assert main(["bound", "toy-4", "--problem", "infermax", "--objective", "latency", "--json"]) == 0
    assert "block-flush-ttft" not in {b["name"] for b in json.loads(capsys.readouterr().out)["bounds"]}
