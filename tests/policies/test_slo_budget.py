"""SLO-aware batching (``slo-budget``, optsched/policies/slo.py and slo_kernel.py).

- The compiled engine is the reference engine batch for batch for ``slo-budget``, ``slo-budget-fcfs``
  and random configurations with a time budget and Moore-Hodgson's reordering, on random instances
  with and without SLOs (and the same refusal when the SLOs are missing).
- The time budget holds: every batch of ``slo-budget`` that holds both decodes and prefill stays
  within it.
- The chunk cut is the largest one within the budget (a linear scan); Moore-Hodgson's rule keeps the
  most requests on time of a single machine with deadlines in order (exhaustive search).
- Bad configurations and missing SLOs are refused with a message naming what is missing.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from optsched import Instance, Limits, Request, load_cost_model, replay
from optsched.instance import SLO, InstanceError
from optsched.policies.config import POLICY_CONFIGS, PolicyConfig
from optsched.policies.engine import Engine, simulate
from optsched.policies.slo import fit_chunk, on_time_first
from tests.policies.test_fastengine import assert_same
from tests.policies.test_policy_properties import COSTS, configs, instances

H200 = load_cost_model("llama2-7b-h200")
SLO_POLICIES = ("slo-budget", "slo-budget-fcfs", "slo-budget-ef", "slo-budget-fcfs-ef")


@st.composite
def with_slos(draw, costs: list | None = None) -> Instance:
    """A random instance whose requests carry random TTFT and TPOT targets (some none)."""
    inst = draw(instances())
    if costs is not None:
        inst = replace(inst, cost_model=draw(st.sampled_from(costs)))
    scale = 1.0 if inst.cost_model.base >= 1 else 0.01  # unit cost: seconds per batch; else ~ms
    targets = st.one_of(st.none(), st.floats(0.5, 20).map(lambda x: round(x * scale, 6)))
    reqs = tuple(replace(r, slo=SLO(ttft=draw(targets), tpot=draw(targets))) for r in inst.requests)
    return replace(inst, requests=reqs)


@settings(max_examples=300, deadline=None)
@given(with_slos(), st.sampled_from(SLO_POLICIES))
def test_slo_policies_compiled_equal_the_reference(instance: Instance, name: str) -> None:
    assert_same(instance, name)


@settings(max_examples=200, deadline=None)
@given(with_slos(), configs(), st.one_of(st.none(), st.floats(1e-4, 5)), st.booleans(), st.booleans())
def test_any_config_with_a_time_budget_compiled_equals_the_reference(
    instance: Instance, config: PolicyConfig, budget: float | None, tpot: bool, drop: bool
) -> None:
    fcfs = config.order == "arrival" and "all" not in config.groups
    config = replace(config, time_budget=budget, tpot_budget=tpot, ttft_drop=drop and fcfs)
    assert_same(instance, config)


@settings(max_examples=200, deadline=None)
@given(with_slos(costs=COSTS[1:] + [H200]), st.sampled_from(SLO_POLICIES))
def test_batches_stay_within_the_budget(instance: Instance, name: str) -> None:
    try:
        schedule = simulate(instance, name)
    except InstanceError:
        assert not any(r.slo is not None and r.slo.tpot is not None for r in instance.requests) or not any(
            r.slo is not None and r.slo.ttft is not None for r in instance.requests
        )
        return
    budget = min(r.slo.tpot for r in instance.requests if r.slo is not None and r.slo.tpot is not None)
    result = replay(instance, schedule)
    assert result.feasible
    for feats in result.features:
        # within the budget, or decodes alone (never cut), or no decode (no TPOT runs: never cut)
        assert instance.cost_model.batch_time(*feats) <= budget or feats[1] == 0 or feats[3] == 0, (feats, budget)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 40),
    st.integers(0, 40),
    st.integers(0, 12),
    st.integers(0, 5000),
    st.integers(0, 60),
    st.integers(0, 300),
    st.floats(0, 0.2),
    st.booleans(),
)
def test_the_chunk_is_the_largest_within_the_budget(
    n_pre: int, n_dec: int, m: int, kv: int, c: int, held: int, budget: float, cut: bool
) -> None:
    class Draft:
        n_tok, s_pre, kv_dec, x_pre, kv_max = n_pre + n_dec, n_pre * n_pre, kv, 0, min(kv, held)

    Draft.n_pre, Draft.n_dec, Draft.cut = n_pre, n_dec, cut
    d = Draft()
    got = fit_chunk(H200, budget, d, c, m)
    fits = [
        k
        for k in range(c + 1)
        if H200.batch_time(d.n_tok + k, d.n_pre + k, d.s_pre + k * k, d.n_dec, d.kv_dec, d.x_pre + k * m, d.kv_max)
        <= budget
    ]
    assert got == (c if n_dec == 0 and not cut else max(fits, default=0))  # cut: tpot_lazy's (.slo_lazy)


def _on_time(order: list[int], works: list[float], deadlines: list[float]) -> int:
    t, count = 0.0, 0
    for p in order:
        t += works[p]
        if t > deadlines[p]:
            return -1
        count += 1
    return count


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 9), st.integers(1, 30)), min_size=0, max_size=9))
def test_moore_hodgson_keeps_the_most_requests_on_time(jobs: list[tuple[int, int]]) -> None:
    jobs.sort(key=lambda j: j[1])  # deadlines in R_w's order (equal TTFT targets, FCFS)
    works = [float(w) for w, _ in jobs]
    deadlines = [float(d) for _, d in jobs]
    order = on_time_first(works, deadlines, 0.0, 0.0)
    assert sorted(order) == list(range(len(jobs)))
    best = 0
    for size in range(len(jobs), 0, -1):  # exhaustive: the largest set on time in deadline order
        if any(_on_time(list(s), works, deadlines) >= 0 for s in itertools.combinations(range(len(jobs)), size)):
            best = size
            break
    kept = [p for p in order if _on_time(order[: order.index(p) + 1], works, deadlines) >= 0]
    assert len(kept) == best  # the kept ones come first, all on time, and as many as possible
    assert kept == sorted(kept) and order[: len(kept)] == kept


def test_a_planted_wrong_rule_is_caught() -> None:
    # FCFS without dropping keeps 1 of these on time; Moore-Hodgson drops the long first one: 2
    works, deadlines = [5.0, 1.0, 1.0], [5.0, 2.0, 3.0]
    assert _on_time([0, 1, 2], works, deadlines) == -1
    assert on_time_first(works, deadlines, 0.0, 0.0) == [1, 2, 0]


def test_missing_slos_and_bad_configs_are_refused() -> None:
    inst = Instance("plain", H200, Limits(64, 64, None, None), (Request("a", 0.0, 8, 3),))
    for compiled in (False, True):
        with pytest.raises(InstanceError, match="no request has a TTFT target"):
            simulate(inst, "slo-budget", compiled=compiled)
        with pytest.raises(InstanceError, match="no request has one: give the requests an SLO"):
            simulate(inst, "slo-budget-fcfs", compiled=compiled)
    with pytest.raises(ValueError, match="Engine.from_instance, or set time_budget"):
        Engine(inst.limits, H200, "slo-budget-fcfs")
    with pytest.raises(ValueError, match="ttft_drop reorders an FCFS R_w"):
        replace(POLICY_CONFIGS["slo-budget"], order="output")
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="time_budget must be a positive number"):
            replace(POLICY_CONFIGS["sarathi-pc"], time_budget=bad)
    # an explicit budget needs no TPOT target
    timed = replace(POLICY_CONFIGS["slo-budget-fcfs"], time_budget=0.05)
    assert replay(inst, simulate(inst, timed)).feasible
