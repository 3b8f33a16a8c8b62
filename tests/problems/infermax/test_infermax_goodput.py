"""The goodput objective: exact on tiny instances, its upper bound and the quantile bounds proven.

- the solve (``--objective goodput``, CP-SAT with per-request indicators) equals the exhaustive
  search of :mod:`tests.support.goodput_bruteforce` on random tiny offline instances with SLOs,
  with and without evictions, and its upper bound is never below that optimum;
- on random instances of 20 to 200 requests with arrivals, the upper bound of
  :mod:`optsched.problems.infermax.goodput_bounds` is never below any policy's replayed goodput, the
  TTFT / TPOT quantile bounds never above any policy's quantiles, and a target that a policy meets
  is never declared unreachable;
- a planted invalid bound is caught by the solve.
"""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest

from optsched.bounds import request_bounds
from optsched.budget import TimeBudget
from optsched.instance import SLO, parse_instance
from optsched.problems.infermax import goodput, goodput_bounds
from optsched.problems.infermax.candidates import GOODPUT_FIRST_POLICIES
from optsched.result import objective_of
from optsched.schedule import replay
from optsched.sweep.cells import SloTarget
from tests.support.goodput_bruteforce import exhaustive_goodput
from tests.support.infermax import policy_schedules, solve, tiny_instance


def with_random_slos(inst, seed: int):
    """Every request gets a TTFT target of 0.9 to 3 times its least TTFT alone and, mostly, a TPOT
    target of 0.9 to 3 times its least TPOT: some are lost alone, most compete."""
    rng = random.Random(seed)
    reqs = []
    for r in inst.requests:
        rb = request_bounds(inst, r)
        ttft = rb.ttft * rng.uniform(0.9, 3.0)
        tpot = rb.tpot * rng.uniform(0.9, 3.0) if rb.tpot is not None and rng.random() < 0.7 else None
        reqs.append(replace(r, slo=SLO(ttft=ttft, tpot=tpot)))
    return replace(inst, requests=tuple(reqs))


@pytest.mark.parametrize("seed", range(24))
def test_goodput_optimum_equals_exhaustive_search(seed: int) -> None:
    inst = with_random_slos(tiny_instance(seed, n_max=3), seed)
    for evict in (False, True):
        if evict and sum(r.prompt_tokens + r.output_tokens for r in inst.requests) > 10:
            continue  # the search with evictions enumerates every refill: kept to the smaller instances
        expected = exhaustive_goodput(inst, evict=evict)
        res = solve(inst, objective="goodput", no_evict=not evict)
        rep = replay(inst, res.schedule)
        assert rep.feasible, rep.violations
        assert res.sense == "max"
        assert res.objective == objective_of(rep, "goodput")
        assert res.status == "optimal", res.extra
        assert res.objective == expected
        assert res.bound >= expected


def scale_instance(n: int, seed: int):
    """A random online instance of ``n`` requests, loaded enough that SLOs are missed."""
    rng = random.Random(seed)
    t, reqs = 0.0, []
    rate = rng.choice([20.0, 60.0, 150.0])
    for i in range(n):
        t += rng.expovariate(rate)
        reqs.append({
            "id": f"r{i}",
            "prompt_tokens": rng.randint(1, 600),
            "output_tokens": rng.randint(1, 60),
            "arrival": round(t, 4),
        })
    limits = {"token_budget": rng.choice([512, 2048]), "kv_capacity": rng.choice([None, 20000, 60000])}
    profile = rng.choice(["llama2-7b-a100", "llama2-7b-h200"])
    return parse_instance({"name": f"gp-{seed}", "cost_model": profile, "limits": limits, "requests": reqs}, "gp")


@pytest.mark.parametrize("seed", range(6))
def test_bounds_hold_against_every_policy(seed: int) -> None:
    rng = random.Random(seed)
    inst = scale_instance(rng.randint(20, 200), seed)
    ttft, tpot = rng.choice([0.05, 0.2, 1.0]), rng.choice([0.02, 0.05, 0.1])
    sloed = goodput_bounds.with_slos(inst, ttft, tpot)
    facts = goodput_bounds.request_facts(inst)
    arrival = np.array([r.arrival for r in inst.requests])
    upper = goodput_bounds.goodput_upper_bound(sloed)
    p99_ttft = goodput_bounds.ttft_quantile_bound(facts, arrival, 0.99, iterations=10)
    p99_tpot = goodput_bounds.tpot_quantile_bound(facts, 0.99)
    for name, schedule in policy_schedules(sloed).items():
        rep = replay(sloed, schedule)
        assert rep.feasible, (name, rep.violations)
        assert objective_of(rep, "goodput") <= upper, name
        assert rep.metrics.ttft_p99 >= p99_ttft * (1 - 1e-9), name
        if p99_tpot is not None:
            assert rep.metrics.tpot_p99 >= p99_tpot * (1 - 1e-9), name
        for limits in ((ttft, tpot), (rep.metrics.ttft_p99, rep.metrics.tpot_p99)):
            if SloTarget(*limits, 0.99).met_by(rep):  # a target some schedule meets is never refuted
                assert goodput_bounds.target_unreachable(facts, arrival, *limits, 0.99) is None, (name, limits)


def test_some_requests_are_proven_lost_under_overload() -> None:
    inst = goodput_bounds.with_slos(scale_instance(200, 1), 0.05, 0.02)
    upper = goodput_bounds.goodput_upper_bound(inst)
    assert upper < len(inst.requests)


def test_a_planted_invalid_bound_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    inst = with_random_slos(tiny_instance(7, n_max=3), 7)
    assert solve(inst, objective="goodput").objective >= 1
    monkeypatch.setattr(goodput, "goodput_upper_bound", lambda *args, **kwargs: 0)
    with pytest.raises(RuntimeError, match="above the proven bound"):
        solve(inst, objective="goodput")


def test_goodput_solve_of_a_larger_instance_reports_a_gap() -> None:
    inst = goodput_bounds.with_slos(scale_instance(40, 3), 0.05, 0.03)
    res = solve(inst, objective="goodput", time_limit=5)
    assert res.sense == "max" and res.bound >= res.objective
    assert res.objective == objective_of(replay(inst, res.schedule), "goodput")


def test_goodput_candidates_start_with_the_slo_aware_policies_and_keep_the_clock() -> None:
    """Under a time limit at scale the candidates are offered in ``GOODPUT_FIRST_POLICIES``' order, and the
    policies without a clock inside (not of the unified scheduler) are left out: on 1,000 requests of
    a trace they took minutes and the solve ended past its limit without a schedule."""
    from optsched.policies.config import POLICY_CONFIGS

    inst = goodput_bounds.with_slos(scale_instance(60, 4), 0.2, 0.05)
    res = solve(inst, objective="goodput", time_limit=30)
    offered = list(res.extra["candidates"])
    first = [name for name in GOODPUT_FIRST_POLICIES if name in offered]
    assert first == list(GOODPUT_FIRST_POLICIES)
    assert offered[: len(first)] == first
    assert all(name in POLICY_CONFIGS or name == "serial" for name in offered)
    assert res.objective >= max(res.extra["candidates"].values())


def test_the_upper_bound_cut_short_is_weaker_and_still_proven() -> None:
    """With its budget spent, the goodput bound prices no interval: it counts the requests not lost
    alone, at least the full bound and at least every policy's goodput."""
    inst = goodput_bounds.with_slos(scale_instance(200, 1), 0.05, 0.02)
    facts, slo = goodput_bounds.request_facts(inst), goodput_bounds.slo_arrays(inst)
    arrival = np.array([r.arrival for r in inst.requests])
    full = goodput_bounds.max_met(facts, arrival, slo)
    spent = goodput_bounds.max_met(facts, arrival, slo, budget=TimeBudget.of(0.0))
    assert full < spent == int(goodput_bounds.alive_requests(facts, slo).sum())
    assert all(objective_of(replay(inst, s), "goodput") <= full for s in policy_schedules(inst).values())


def test_the_rows_cut_short_price_nothing_and_a_met_count_ends_the_bound() -> None:
    """With the budget spent the TPOT rows price nothing (fewer rows: a weaker bound); a count that
    some schedule meets and that reaches the requests not lost alone is the bound, the full bound's
    value, and below that it changes nothing."""
    from optsched.problems.infermax.tpot_pricing import tpot_rows

    inst = goodput_bounds.with_slos(scale_instance(200, 1), 0.05, 0.02)
    facts, slo = goodput_bounds.request_facts(inst), goodput_bounds.slo_arrays(inst)
    alive = goodput_bounds.alive_requests(facts, slo)
    every = np.ones(int(alive.sum()), dtype=bool)
    args = (facts.tpot, facts.output[alive], slo.tpot[alive], every)
    assert len(tpot_rows(*args)[0]) > 0 and len(tpot_rows(*args, budget=TimeBudget.of(0.0))[0]) == 0
    arrival = np.array([r.arrival for r in inst.requests])
    full = goodput_bounds.max_met(facts, arrival, slo)
    assert goodput_bounds.max_met(facts, arrival, slo, met=full - 1) == full
    loose = goodput_bounds.with_slos(inst, 10.0, 1.0)
    n = len(loose.requests)
    met = max(objective_of(replay(loose, s), "goodput") for s in policy_schedules(loose).values())
    assert met == n == goodput_bounds.goodput_upper_bound(loose) == goodput_bounds.goodput_upper_bound(loose, met=n)


def test_a_bisection_cut_short_keeps_a_weaker_proven_bound() -> None:
    """The report gives the P99 bounds a share of its time limit: when it runs out, the TTFT
    bisection returns the bound it has, never above the full one (which every policy respects)."""
    inst = scale_instance(120, 3)
    facts = goodput_bounds.request_facts(inst)
    arrival = np.array([r.arrival for r in inst.requests])
    full = goodput_bounds.ttft_quantile_bound(facts, arrival, 0.99, iterations=12)
    spent = goodput_bounds.ttft_quantile_bound(facts, arrival, 0.99, iterations=12, budget=TimeBudget.of(0.0))
    assert 0.0 < spent <= full
    assert spent == float(np.sort(facts.first)[int(0.99 * (len(arrival) - 1))])  # the least TTFTs' order statistic
    assert goodput_bounds.tail_bounds(inst, budget=TimeBudget.of(0.0))["ttft_p99"] == spent


def test_goodput_without_any_slo_is_refused() -> None:
    """No request carries an SLO: every schedule meets them all, so the goodput says nothing; the
    solve, the bound, the first answer and the report refuse it, naming the instance."""
    from optsched import problems
    from optsched.budget import TimeBudget
    from optsched.commands.solve import first_answer
    from optsched.instance import InstanceError, load_instance
    from optsched.report import build_report

    inst = load_instance("infermax-i1024-o32-n64")
    assert all(r.slo is None for r in inst.requests)
    calls = [
        lambda: solve(inst, objective="goodput"),
        lambda: goodput_bounds.goodput_bound(inst),
        lambda: first_answer(problems.formulation("infermax"), inst, {"objective": "goodput"}, TimeBudget.of(10.0)),
        lambda: build_report(inst, objective="goodput", time_limit=10, solve_max_requests=0),
    ]
    for call in calls:
        with pytest.raises(InstanceError, match="infermax-i1024-o32-n64: objective 'goodput': no request carries"):
            call()
