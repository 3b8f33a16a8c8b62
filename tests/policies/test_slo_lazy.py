"""The laxity rule (``tpot_lazy``, ``slo-lazy``; optsched/policies/slo_lazy.py and slo_kernel.py).

- The compiled engine is the reference engine batch for batch for random configurations with the
  rule (any horizon, with and without deferred decodes and Moore-Hodgson, eviction-free or not) on
  random instances with SLOs.
- The guarantee of the module docstring, checked on every replayed schedule: a request with a TPOT
  target at least the budget, never evicted and never deferred, whose decode span holds only batches
  within the budget, meets its TPOT.
- A hand-made instance: a request that banked slack in short batches skips batches while an urgent
  prompt is served (which gets its first token earlier than under ``slo-budget``) and still meets its
  TPOT; a planted rule without the laxity check (every decode optional) misses a TPOT target, which
  the same check catches.
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
from optsched.policies import slo_lazy
from optsched.policies.config import POLICY_CONFIGS, PolicyConfig
from optsched.policies.engine import simulate
from optsched.policies.slo import resolve
from optsched.schedule import Schedule
from tests.policies.test_fastengine import assert_same
from tests.policies.test_policy_properties import COSTS
from tests.policies.test_slo_budget import with_slos

H200 = load_cost_model("llama2-7b-h200")
RTOL = 1e-9


@settings(max_examples=250, deadline=None)
@given(
    with_slos(costs=COSTS[1:] + [H200]),
    st.sampled_from([0.05, 0.5, 1.0, math.inf]),
    st.sampled_from([0.0, 0.3]),
    st.booleans(),
    st.booleans(),
    st.sampled_from(["slo-lazy", "slo-budget-fcfs", "slo-shed"]),
)
def test_lazy_configs_compiled_equal_the_reference(
    instance: Instance, horizon: float, shed: float, drop: bool, ef: bool, base: str
) -> None:
    config = replace(POLICY_CONFIGS[base], tpot_lazy=True, lazy_horizon=horizon, tpot_shed=shed, ttft_drop=drop)
    assert_same(instance, config.eviction_free_variant() if ef else config)


def tpot_misses_within_budget(instance: Instance, schedule: Schedule, budget: float) -> list[str]:
    """The requests the guarantee covers that miss their TPOT: a TPOT target >= ``budget``, never evicted,
    and every batch from their first token to their finish within ``budget``."""
    result = replay(instance, schedule)
    assert result.feasible, result.violations[:3]
    times = list(zip(result.starts, result.ends, strict=True))
    missed = []
    for r in instance.requests:
        o = result.outcomes[r.id]
        if r.output_tokens < 2 or r.slo is None or r.slo.tpot is None or r.slo.tpot < budget or o.evictions:
            continue
        span = [e - s for s, e in times if s >= o.first_token * (1 - RTOL) and e <= o.finish * (1 + RTOL)]
        if max(span, default=0.0) > budget * (1 + RTOL):
            continue  # the premise fails (a decode-only batch beyond the budget)
        if (o.finish - o.first_token) / (r.output_tokens - 1) > r.slo.tpot * (1 + RTOL):
            missed.append(r.id)
    return missed


@settings(max_examples=200, deadline=None)
@given(with_slos(costs=COSTS[1:] + [H200]), st.sampled_from([0.5, math.inf]))
def test_covered_requests_meet_their_tpot(instance: Instance, horizon: float) -> None:
    config = replace(POLICY_CONFIGS["slo-lazy"], lazy_horizon=horizon)
    try:
        config = resolve(config, instance.requests, instance.cost_model)
    except ValueError:
        return  # no TPOT or TTFT target to read
    assert config.time_budget is not None
    limits = instance.limits  # C holds every mandatory decode (the guarantee's premise)
    instance = replace(instance, limits=replace(limits, token_budget=max(limits.token_budget, len(instance.requests))))
    schedule = simulate(instance, config)
    assert tpot_misses_within_budget(instance, schedule, config.time_budget) == []


def _instance() -> Instance:
    """A decode running alone in short batches (it banks slack), then a burst of long prompts."""
    slo = SLO(ttft=1.0, tpot=0.05)
    reqs = [Request("dec", 0.0, 2000, 1000, slo=slo)]
    reqs += [Request(f"p{k}", 2.0 + 0.02 * k, 3500, 2, slo=slo) for k in range(120)]
    return Instance("lazy", H200, Limits(4096, 4096, None, None), tuple(reqs))


def _skipped_batches(schedule: Schedule, request: str, first: float, finish: float, starts: list[float]) -> int:
    return sum(
        first <= s < finish and all(it.id != request for it in b.items)
        for b, s in zip(schedule.batches, starts, strict=True)
    )


def test_a_skipped_decode_still_meets_its_tpot() -> None:
    inst = _instance()
    outcomes = {}
    for name in ("slo-budget", "slo-lazy"):
        for compiled in (False, True):
            schedule = simulate(inst, name, compiled=compiled)
            result = replay(inst, schedule)
            assert result.feasible
            outcomes[name, compiled] = result.outcomes
            assert tpot_misses_within_budget(inst, schedule, 0.05) == []
            dec = result.outcomes["dec"]
            skipped = _skipped_batches(schedule, "dec", dec.first_token, dec.finish, result.starts)
            assert (skipped > 0) == (name == "slo-lazy")  # slo-budget decodes in every batch
            assert (dec.finish - dec.first_token) / 999 <= 0.05 * (1 + RTOL)
        assert outcomes[name, False] == outcomes[name, True]
    plain, lazy = outcomes["slo-budget", False], outcomes["slo-lazy", False]
    ttft = {n: sum(o[f"p{k}"].first_token - 2.0 - 0.02 * k for k in range(120)) for n, o in (("b", plain), ("l", lazy))}
    assert ttft["l"] < ttft["b"]  # the prompts got the budget the skipped decodes left


def test_a_planted_rule_without_the_laxity_check_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    inst = _instance()
    monkeypatch.setattr(slo_lazy, "mandatory", lambda *args: False)  # every decode optional while urgent
    schedule = simulate(inst, "slo-lazy", compiled=False)
    assert tpot_misses_within_budget(inst, schedule, 0.05)  # the burst's own decodes wait past their TPOT


def test_without_an_urgent_prefill_every_decode_runs() -> None:
    slo = SLO(ttft=1.0, tpot=0.05)
    reqs = (Request("a", 0.0, 500, 30, slo=slo), Request("b", 0.0, 800, 20, slo=slo), Request("c", 0.3, 200, 5))
    inst = Instance("calm", H200, Limits(4096, 4096, None, None), reqs)
    for compiled in (False, True):
        assert simulate(inst, "slo-lazy", compiled=compiled).batches == simulate(inst, "slo-budget").batches


def test_bad_lazy_configs_are_refused() -> None:
    with pytest.raises(ValueError, match="tpot_lazy defers decodes within a time budget"):
        replace(POLICY_CONFIGS["sarathi-pc"], tpot_lazy=True)
    with pytest.raises(ValueError, match="tpot_lazy defers decodes within a time budget"):
        PolicyConfig("x", ("waiting", "running"), time_budget=0.1, tpot_lazy=True)
    for bad in (0.0, -1.0, math.nan):
        with pytest.raises(ValueError, match="lazy_horizon must be a positive"):
            replace(POLICY_CONFIGS["slo-lazy"], lazy_horizon=bad)
