"""The goodput windows' TPOT rows with one multiplier per request (:mod:`optsched.problems.infermax.tpot_own`)
are proven.

- those rows alone (the shared-multiplier rows and the others left out) are never below the
  exhaustive optimum on random tiny instances with SLOs;
- never below any policy's replayed goodput (``slo-budget`` among them) on random decode-heavy
  instances of 20 to 200 requests, where they alone tighten the bound below the untimed one;
- a planted invalid row (each request's TPOT target read at a third of its value) is caught.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from optsched.budget import NO_LIMIT
from optsched.problems.infermax import goodput_bounds
from optsched.problems.infermax.tpot_own import own_rows
from tests.problems.infermax.test_goodput_tpot import decode_heavy, policy_goodputs
from tests.problems.infermax.test_infermax_goodput import with_random_slos
from tests.support.goodput_bruteforce import exhaustive_goodput
from tests.support.infermax import tiny_instance


def no_shared_rows(pricing, output, tpot, members, budget=NO_LIMIT):
    """tpot_rows' answer when no request has a TPOT target: no rows."""
    n = len(output)
    return np.empty((0, n)), np.empty((0, n))


def own_bound(inst) -> tuple[int, int]:
    """max_met of ``inst``'s own SLOs with only the per-request TPOT rows, and without any TPOT row."""
    facts = goodput_bounds.request_facts(inst)
    n = len(facts.output)
    alone = replace(facts, cost_full=np.empty((0, n)), cost_first=np.empty((0, n)))
    arrival = np.array([r.arrival for r in inst.requests])
    slo = goodput_bounds.slo_arrays(inst)
    return (
        goodput_bounds.max_met(alone, arrival, slo),
        goodput_bounds.max_met(replace(facts, tpot=()), arrival, slo),
    )


@pytest.fixture
def own_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(goodput_bounds, "tpot_rows", no_shared_rows)


@pytest.mark.parametrize("seed", range(48))
def test_never_below_the_exhaustive_optimum(seed: int, own_only: None) -> None:
    inst = with_random_slos(tiny_instance(seed, n_max=3), seed)
    small = sum(r.prompt_tokens + r.output_tokens for r in inst.requests) <= 10
    best = max(exhaustive_goodput(inst, evict=evict) for evict in ((False, True) if small else (False,)))
    assert own_bound(inst)[0] >= best


def violations(seeds: range) -> list[tuple[int, str, float, int]]:
    """(seed, policy, replayed goodput, bound of the per-request rows) wherever a policy beats it."""
    out = []
    for seed in seeds:
        bound = own_bound(decode_heavy(seed))[0]
        out += [(seed, p, g, bound) for p, g in policy_goodputs(seed).items() if g > bound]
    return out


def test_never_below_any_policy_and_tighter_somewhere(own_only: None) -> None:
    assert "slo-budget" in policy_goodputs(0)
    assert violations(range(10)) == []
    tighter = [s for s in range(10) if (b := own_bound(decode_heavy(s)))[0] < b[1]]
    assert tighter, "the per-request TPOT rows never bite on these instances: the check above would be vacuous"


def test_a_planted_invalid_row_is_caught(monkeypatch: pytest.MonkeyPatch, own_only: None) -> None:
    def tighter(pricing, output, tpot, members, budget=NO_LIMIT):  # reads every TPOT target at a third
        return own_rows(pricing, output, tpot / 3, members, budget)

    monkeypatch.setattr(goodput_bounds, "own_rows", tighter)
    assert violations(range(10)), "a per-request TPOT row priced at a third of the targets went unnoticed"
