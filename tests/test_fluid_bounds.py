"""The fluid bound on mean latency (``optsched/fluid_bounds.py``) against exhaustive search and policies.

- never above the exhaustive optimum on random tiny instances, with and without arrivals, KV, C and
  R_max limits (``tests/support/latency_bruteforce.py``);
- never above any policy's replayed mean latency on random loaded instances of 20 to 200 requests;
- planted invalid variants (10 % above; each request's progress counted twice; a batch's overhead
  paid by each of its items; the span row's whole least own-batch time instead of its half) are
  caught by those checks;
- the span row raises the bound under load (it is in the programme HiGHS solves);
- listed by ``optsched bound --objective latency`` and by the InferMax bounder.
"""

from __future__ import annotations

import numpy as np
import pytest

from optsched.bounds import critical_path_times
from optsched.fluid_bounds import FLUID_TIME, FluidTerms, fluid_grid, fluid_latency, fluid_lp
from optsched.load_bounds import LP_STRETCH, most_items
from optsched.result import replayed_objective
from tests.support.bound_checks import check_listed_for_latency_only, loaded_instance, policy_values
from tests.support.infermax import tiny_instance
from tests.support.latency_bruteforce import exhaustive_mean

#: HiGHS' time limit in these checks (seconds): the most the InferMax bounder gives the fluid LP, room
#: for a loaded shared machine (a solve stopped by its limit gives no bound, which a check reads as a
#: failure).
SOLVE_TIME = LP_STRETCH * FLUID_TIME

#: Seeds of tiny instances with two or more requests (one request proves little about load).
TINY = [s for s in range(48) if len(tiny_instance(s).requests) >= 2]


def optimum(inst) -> float:
    """The exhaustive least mean latency, after checking that its schedule replays to it."""
    found = exhaustive_mean(inst, "latency")
    assert found is not None
    value, path = found
    assert replayed_objective(inst, path, "latency")[0] == pytest.approx(value, rel=1e-9)
    return value


def fluid(inst) -> float:
    bound = fluid_latency(inst, most_items(inst), SOLVE_TIME)
    assert bound is not None and bound.valid and bound.name == "fluid-latency"
    return bound.value


def planted(inst, fault: str) -> float:
    """An invalid variant: 10 % above, every request's progress weight doubled (each token counted
    twice), a batch's overhead paid in full by each of the K items it may hold, or the span row's
    H_i doubled (the whole least time of a request's own batches after its weighted mean item time)."""
    if fault == "ten-percent":
        return 1.1 * fluid(inst)
    terms = FluidTerms(inst)
    if fault == "weight-twice":
        terms.weight = 2.0 * terms.weight
    elif fault == "span-twice":
        terms.span = 2.0 * terms.span
    else:
        terms.overhead = terms.overhead * most_items(inst)
    tau = fluid_grid(terms, most_items(inst))
    assert tau is not None
    value = fluid_lp(terms, tau, most_items(inst), SOLVE_TIME)
    return 0.0 if value is None else value  # an unsolved variant catches nothing


@pytest.mark.parametrize("arrivals", [False, True])
def test_the_fluid_bound_is_at_most_the_exhaustive_optimum(arrivals: bool) -> None:
    above_alone = 0
    for seed in TINY:
        inst = tiny_instance(seed, arrivals=arrivals)
        best, value = optimum(inst), fluid(inst)
        assert value <= best * (1 + 1e-9), (seed, value, best)
        alone = float(np.mean(critical_path_times(inst)))
        assert value >= alone * (1 - 1e-5)  # the programme holds the least time alone of each request
        above_alone += value > alone * (1 + 1e-4)
    assert above_alone  # it sees the others somewhere


@pytest.mark.parametrize("n, seed", [(20, 1), (50, 2), (120, 3), (200, 4), (80, 5), (30, 6)])
def test_the_fluid_bound_is_at_most_every_policy(n: int, seed: int) -> None:
    inst = loaded_instance(n, seed)
    least = min(policy_values(inst, "latency").values())
    assert fluid(inst) <= least * (1 + 1e-9)


@pytest.mark.parametrize("fault", ["ten-percent", "weight-twice", "overhead-per-item", "span-twice"])
def test_a_planted_invalid_variant_is_caught(fault: str) -> None:
    caught = []
    for arrivals in (False, True):
        for seed in TINY:
            inst = tiny_instance(seed, arrivals=arrivals)
            if planted(inst, fault) > optimum(inst) * (1 + 1e-9):
                caught.append((seed, arrivals))
    for n, seed in [(50, 2), (120, 3)]:
        inst = loaded_instance(n, seed)
        if planted(inst, fault) > min(policy_values(inst, "latency").values()) * (1 + 1e-9):
            caught.append((n, seed))
    assert caught


def test_the_span_row_raises_the_bound_under_load() -> None:
    """Without the span rows (H_i = 0 leaves the presence rows' sum) the optimum is lower on a loaded
    instance whose requests share batches across intervals."""
    inst = loaded_instance(120, 3)
    terms = FluidTerms(inst)
    tau = fluid_grid(terms, most_items(inst))
    assert tau is not None
    with_span = fluid_lp(terms, tau, most_items(inst), SOLVE_TIME)
    terms.span = 0.0 * terms.span
    without = fluid_lp(terms, tau, most_items(inst), SOLVE_TIME)
    assert with_span is not None and without is not None
    assert with_span > without * (1 + 1e-3), (with_span, without)


def test_the_fluid_bound_is_listed_by_bound_and_the_infermax_bounder(capsys) -> None:
    check_listed_for_latency_only(capsys, "fluid-latency")


def test_no_bound_beyond_the_grid() -> None:
    """Above FLUID_CELLS / FLUID_GRID[0] requests the programme is not built (None, not a guess)."""
    inst = loaded_instance(1_200, 7)
    assert fluid_grid(FluidTerms(inst), most_items(inst)) is None
    assert fluid_latency(inst, most_items(inst)) is None
