"""Deferred decodes (``tpot_shed``, ``slo-shed``; optsched/policies/slo.py and slo_kernel.py).

- The compiled engine is the reference engine batch for batch for ``slo-shed`` and random
  configurations that defer decodes, on random instances with SLOs.
- The threshold defers at most floor(q (N - 1)) requests and is the least decode work that does
  (exhaustive over the candidate values); the deferred requests are those of the most decode work.
- A deferred decode joins a batch only when the batch is empty or stays within the budget, and the
  deferral gives the prefill of a waiting request the budget the deferred decode took.
- Bad configurations are refused with a message naming the option.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from optsched import Instance, Limits, Request, load_cost_model, replay
from optsched.instance import SLO
from optsched.policies.config import POLICY_CONFIGS, PolicyConfig
from optsched.policies.engine import Engine, simulate
from optsched.policies.slo import decode_work, resolve, shed_threshold, sheds
from tests.policies.test_fastengine import assert_same
from tests.policies.test_policy_properties import COSTS
from tests.policies.test_slo_budget import with_slos

H200 = load_cost_model("llama2-7b-h200")


@settings(max_examples=200, deadline=None)
@given(
    with_slos(costs=COSTS[1:] + [H200]),
    st.floats(0.0, 0.95),
    st.booleans(),
    st.booleans(),
    st.sampled_from(["slo-shed", "slo-budget-fcfs"]),
)
def test_deferring_configs_compiled_equal_the_reference(
    instance: Instance, fraction: float, drop: bool, ef: bool, base: str
) -> None:
    config = replace(POLICY_CONFIGS[base], tpot_shed=fraction, ttft_drop=drop)
    assert_same(instance, config.eviction_free_variant() if ef else config)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 5000), st.integers(1, 40)), min_size=0, max_size=30), st.floats(0.0, 0.99))
def test_the_threshold_is_the_least_within_the_count(sizes: list[tuple[int, int]], fraction: float) -> None:
    requests = [Request(f"r{j}", 0.0, p, o) for j, (p, o) in enumerate(sizes)]
    k = math.floor(fraction * (len(requests) - 1)) if requests else 0
    works = [decode_work(H200, r) for r in requests]
    t = shed_threshold(H200, requests, fraction)
    assert sum(w >= t for w in works) <= k
    assert all(sum(x >= v for x in works) > k for v in works if v < t)  # no lower work value defers <= k
    deferred = [w for w in works if w >= t]
    assert all(w <= min(deferred, default=math.inf) for w in works if w < t)  # the most decode work is deferred


def _instance() -> Instance:
    """Two decodes (one of a long context) running when a 2,000-token prompt arrives."""
    slo = SLO(ttft=1.0, tpot=0.05)
    reqs = (
        Request("long", 0.0, 6000, 40, slo=slo),
        Request("short", 0.0, 100, 40, slo=slo),
        Request("late", 0.2, 2000, 2, slo=slo),
    )
    return Instance("shed", H200, Limits(4096, 4096, None, None), reqs)


def test_a_deferred_decode_leaves_its_budget_to_the_prefill() -> None:
    inst = _instance()
    shed = replace(POLICY_CONFIGS["slo-shed"], tpot_shed=0.5)  # floor(0.5 * 2) = 1 request: "long"
    assert [sheds(H200, resolve(shed, inst.requests, H200), r) for r in inst.requests] == [True, False, False]
    outcomes = {}
    for config in (POLICY_CONFIGS["slo-budget"], shed):
        for compiled in (False, True):
            schedule = simulate(inst, config, compiled=compiled)
            result = replay(inst, schedule)
            assert result.feasible
            outcomes[config.name, compiled] = result.outcomes
            for batch, feats in zip(schedule.batches, result.features, strict=True):
                decodes = {it.id for it in batch.items if it.tokens == 1}
                if config is shed and "long" in decodes and feats[1] > 0:  # beside prefill: within the budget
                    assert H200.batch_time(*feats) <= 0.05
        assert outcomes[config.name, False] == outcomes[config.name, True]
    plain, deferred = outcomes["slo-budget", False], outcomes["slo-shed", False]
    assert deferred["late"].first_token < plain["late"].first_token  # the prefill got the budget
    assert deferred["long"].finish > plain["long"].finish  # the deferred request paid for it


def test_deferring_everything_still_finishes_every_request() -> None:
    inst = _instance()
    everything = replace(POLICY_CONFIGS["slo-budget"], shed_work=0.0)
    for compiled in (False, True):
        result = replay(inst, simulate(inst, everything, compiled=compiled))
        assert result.feasible and all(o.finish is not None for o in result.outcomes.values())


def test_bad_deferral_configs_are_refused() -> None:
    for bad in (-0.1, 1.0, math.nan):
        with pytest.raises(ValueError, match="tpot_shed must be a fraction"):
            replace(POLICY_CONFIGS["slo-shed"], tpot_shed=bad)
    for bad in (-1.0, math.nan):
        with pytest.raises(ValueError, match="shed_work must be a number of seconds"):
            replace(POLICY_CONFIGS["slo-shed"], shed_work=bad)
    with pytest.raises(ValueError, match="defer decodes within a time budget"):
        replace(POLICY_CONFIGS["sarathi-pc"], tpot_shed=0.01)
    with pytest.raises(ValueError, match="defer decodes within a time budget"):
        PolicyConfig("x", ("waiting", "running"), time_budget=0.1, shed_work=1.0)
    with pytest.raises(ValueError, match="tpot_shed needs the cost model"):
        resolve(POLICY_CONFIGS["slo-shed"], _instance().requests)
    timed = replace(POLICY_CONFIGS["slo-shed"], time_budget=0.05)
    with pytest.raises(ValueError, match="Engine.from_instance, or set shed_work"):
        Engine(_instance().limits, H200, timed)
    Engine(_instance().limits, H200, replace(timed, shed_work=1.0))  # a threshold of its own runs
