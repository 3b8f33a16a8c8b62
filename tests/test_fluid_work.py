"""The fluid bound with each request's whole least item work (``optsched/fluid_work.py``).

- never above the exhaustive optimum on random tiny instances, with and without arrivals (KV
  capacity down to the largest request's need, where requests take turns for memory; C and R_max
  limits), and never below ``fluid-latency`` there (its programme holds every row of that one);
- never above any policy's replayed mean latency on random loaded instances of 20 to 200 requests;
- planted invalid variants (10 % above; each request's least work counted ten times) are caught by those
  checks;
- above ``fluid-latency`` on a loaded instance (the work rows are in the programme HiGHS solves);
- listed by ``optsched bound --objective latency`` and by the InferMax bounder, not for TTFT.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest

from optsched.fluid_bounds import FluidTerms, fluid_grid, fluid_latency, fluid_lp
from optsched.fluid_work import WORK_TIME, fluid_work, least_work, work_rows
from optsched.load_bounds import LP_STRETCH, lp_bounds, most_items, prompt_attention_extra
from tests.support.bound_checks import (
    LOADED,
    check_listed_for_latency_only,
    check_never_above_any_policy,
    check_never_above_the_exhaustive_optimum,
    loaded_instance,
    refutations,
)

#: HiGHS' time limit in these checks (seconds): the most ``lp_bounds`` gives the programme (a solve
#: stopped by its limit gives no bound, which a check reads as a failure).
SOLVE_TIME = LP_STRETCH * WORK_TIME


def attention(inst) -> np.ndarray:
    return prompt_attention_extra(inst, inst.columns[1])


def work_value(inst, scale: float = 1.0) -> float:
    """The programme's value with each least work times ``scale`` (1: the bound; 0 where none)."""
    terms = FluidTerms(inst)
    tau = fluid_grid(terms, most_items(inst))
    assert tau is not None
    extra = partial(work_rows, work=scale * least_work(inst, attention(inst)))
    value = fluid_lp(terms, tau, most_items(inst), SOLVE_TIME, extra=extra)
    return 0.0 if value is None else value


def bound_value(inst) -> float:
    bound = fluid_work(inst, most_items(inst), attention(inst), SOLVE_TIME)
    assert bound is not None and bound.valid and bound.name == "fluid-work"
    return bound.value


def listed(inst) -> float:
    """``fluid-work`` as :func:`optsched.load_bounds.lp_bounds` lists it."""
    return next(b.value for b in lp_bounds(inst, "latency") if b.name == "fluid-work")


@pytest.mark.parametrize("arrivals", [False, True])
def test_the_bound_is_at_most_the_exhaustive_optimum(arrivals: bool) -> None:
    checked = check_never_above_the_exhaustive_optimum(listed, bound_value, "latency", arrivals)
    for inst, value in checked:
        fluid = fluid_latency(inst, most_items(inst), SOLVE_TIME)
        assert fluid is not None and value >= fluid.value * (1 - 1e-5)


@pytest.mark.parametrize("n, seed", LOADED)
def test_the_bound_is_at_most_every_policy(n: int, seed: int) -> None:
    check_never_above_any_policy(bound_value, "latency", n, seed)


@pytest.mark.parametrize("fault", ["ten-percent", "work-tenfold"])
def test_a_planted_invalid_variant_is_caught(fault: str) -> None:
    def planted(inst) -> float:
        return 1.1 * bound_value(inst) if fault == "ten-percent" else work_value(inst, 10.0)

    assert refutations(planted, "latency") > 0


def test_the_work_rows_raise_the_bound_under_load() -> None:
    inst = loaded_instance(120, 3)
    fluid = fluid_latency(inst, most_items(inst), SOLVE_TIME)
    assert fluid is not None
    assert bound_value(inst) > fluid.value * (1 + 1e-3), (bound_value(inst), fluid.value)
    assert work_value(inst, 0.5) < bound_value(inst)  # the least work is what moves it


def test_the_bound_is_listed_by_bound_and_the_infermax_bounder(capsys) -> None:
    check_listed_for_latency_only(capsys, "fluid-work")
