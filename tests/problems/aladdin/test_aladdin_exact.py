"""Aladdin's exact placement (aladdin/exact.py): brute force and the three backends agree, never
worse than best fit, ongoing requests, constraints (d) and the decode slack, time limits, licences, stops."""

from __future__ import annotations

import math
import random
import time
from dataclasses import replace

import pytest

from optsched.budget import NO_LIMIT, TimeBudget
from optsched.instance import InstanceError, load_instance
from optsched.problems.aladdin.cluster import simulate_cluster
from optsched.problems.aladdin.exact import solve_placement
from optsched.problems.aladdin.heuristics import best_fit
from optsched.problems.aladdin.models import AladdinModel, model_from_instance
from optsched.problems.aladdin.placement import Job, PlacementProblem, check_placement, compile_problem
from optsched.problems.aladdin.solve import offline_problem, planned_instance
from tests.support.aladdin import SOLVERS, aladdin_instance, random_heartbeat, random_requests
from tests.support.solving import registered_bounds, registered_solve


def _brute_force(problem: PlacementProblem) -> int:
    cp = compile_problem(problem)
    jobs = list(problem.new)
    best = math.inf

    def feasible(block):
        load = cp.empty_load()
        for job in block:
            load.add(job)
        return not load.violations()

    def partitions(items):
        if not items:
            yield []
            return
        first, rest = items[0], items[1:]
        for part in partitions(rest):
            for k in range(len(part)):
                yield part[:k] + [[first] + part[k]] + part[k + 1 :]
            yield [[first]] + part

    for part in partitions(jobs):
        if len(part) < best and all(feasible(b) for b in part):
            best = len(part)
    return best


@pytest.mark.parametrize("seed", range(6))
def test_exact_matches_brute_force_and_backends_agree(seed):
    rng = random.Random(seed)
    inst = aladdin_instance(random_requests(rng, 6))
    problem = offline_problem(inst)
    truth = _brute_force(problem)
    values = {s: solve_placement(problem, s) for s in SOLVERS}
    for s, r in values.items():
        assert r.status == "optimal" and r.workers == truth, (s, r.workers, truth)
    assert best_fit(problem).workers >= truth


@pytest.mark.parametrize("seed", range(8))
def test_exact_never_worse_than_best_fit_and_respects_constraints_in_simulation(seed):
    rng = random.Random(100 + seed)
    inst = aladdin_instance(random_requests(rng, rng.randint(8, 14)), gamma=0.5, theta=rng.choice([0.8, 1.0]))
    problem = offline_problem(inst)
    cp = compile_problem(problem)
    bf = best_fit(problem)
    ex = {s: solve_placement(problem, s) for s in ("cpsat", "highs")}
    assert ex["cpsat"].workers == ex["highs"].workers
    for result in (bf, ex["cpsat"], ex["highs"]):
        assert result.workers >= ex["cpsat"].workers
        assert check_placement(cp, result.assignment) == []
        # replay in the multi-worker simulator with the planned (predicted) lengths
        sim = simulate_cluster(planned_instance(inst), "given", model=problem.model, assignment=result.assignment)
        assert all(rep.feasible for rep in sim.replays if rep.outcomes)
        assert all(rep.metrics.evictions == 0 for rep in sim.replays if rep.metrics)
        m = problem.model
        for rid, ttft in sim.ttft.items():
            assert ttft <= m.ttft + 1e-9, rid  # (c)
            if sim.atgt[rid] is not None:
                assert sim.atgt[rid] <= m.atgt + 1e-9, rid  # (b)
        for rep in sim.replays:
            assert max(rep.kv_used, default=0) <= m.kv_capacity  # (e)
    bounds = registered_bounds("aladdin", inst, {})
    assert all(b.value <= ex["cpsat"].workers for b in bounds if b.valid)


@pytest.mark.parametrize("seed", range(6))
def test_heartbeat_with_ongoing_requests(seed):
    rng = random.Random(200 + seed)
    m = model_from_instance(aladdin_instance(random_requests(rng, 1)))
    problem = random_heartbeat(rng, m, 3, rng.randint(4, 9))
    cp = compile_problem(problem)
    bf = best_fit(problem)
    results = [solve_placement(problem, s) for s in SOLVERS]
    assert len({r.workers for r in results}) == 1
    for r in results:
        assert r.status == "optimal" and r.workers <= bf.workers
        assert check_placement(cp, r.assignment, exempt=r.unplaceable) == []
        assert r.bound == r.workers
    # existing workers with ongoing requests always count
    assert results[0].workers >= sum(1 for o in problem.ongoing if o)


@pytest.mark.parametrize("solver", ["cpsat", "highs"])
def test_time_limit_covers_the_build_and_keeps_best_fit(solver):
    """A heartbeat whose model takes seconds to build (500 jobs, 60 workers with ongoing requests): with 0.3 s the
    build stops and the answer is best fit's placement with the proven bound (a 0.5 s solve of such
    an instance took 13.5 s: the build was outside the limit)."""
    rng = random.Random(9)
    m = model_from_instance(aladdin_instance(random_requests(rng, 1), kv=400))
    problem = random_heartbeat(rng, m, 60, 500)
    cp = compile_problem(problem)
    t0 = time.perf_counter()
    r = solve_placement(problem, solver, budget=TimeBudget.of(0.3))
    assert time.perf_counter() - t0 < 5.0  # generous: a loaded machine
    bf = best_fit(problem)
    assert r.status in ("time_limit", "optimal") and r.workers <= bf.workers
    assert check_placement(cp, r.assignment, exempt=r.unplaceable) == []
    assert sum(1 for o in problem.ongoing if o) <= r.bound <= r.workers


def test_prefill_preemption_constraint_d():
    m = AladdinModel(
        k1=0.001,
        c1=0.001,
        k2=1e-5,
        c2=1e-3,
        c3=0.01,
        kv_per_token=1,
        kv_per_request=0,
        kv_capacity=1000,
        ttft=1.0,
        atgt=0.05,
    )
    # slack of the ongoing request: 0.05 * 2 - 0.095 = 0.005 s; a 10-token prefill takes 0.011 s
    ongoing = ((Job("old", 5, 10, 2, 0.095),),)
    problem = PlacementProblem(m, ongoing, (Job("new", 10, 5),))
    cp = compile_problem(problem)
    assert "d" in cp.loads[0].violations(problem.new[0])
    r = solve_placement(problem)
    assert r.assignment["new"] == 1 and r.workers == 2


def test_decode_slack_paper_and_atgt_readings():
    """(d) with the paper's slack ``T_dec g - t`` admits a prefill that ATGT's ``g - 1`` intervals cannot absorb."""
    m = AladdinModel(
        k1=0.001,
        c1=0.001,
        k2=1e-5,
        c2=1e-3,
        c3=0.01,
        kv_per_token=1,
        kv_per_request=0,
        kv_capacity=1000,
        ttft=1.0,
        atgt=0.05,
    )
    # g = 3 tokens (2 decode intervals) after 0.085 s: paper slack 0.065 s, ATGT slack 0.015 s
    ongoing = ((Job("old", 5, 10, 3, 0.085),),)
    new = (Job("new", 30, 5),)  # prefill 0.031 s
    assert m.decode_slack(3, 0.085) == pytest.approx(0.065)
    assert m.with_knobs(slack="atgt").decode_slack(3, 0.085) == pytest.approx(0.015)
    paper = solve_placement(PlacementProblem(m, ongoing, new))
    atgt = solve_placement(PlacementProblem(m.with_knobs(slack="atgt"), ongoing, new))
    assert paper.assignment["new"] == 0 and paper.workers == 1
    assert atgt.assignment["new"] == 1 and atgt.workers == 2
    inst = aladdin_instance([{"id": "a", "prompt_tokens": 3, "output_tokens": 2}])
    assert model_from_instance(inst).slack == "paper"
    bad = replace(inst, extra={**inst.extra, "placement": {**inst.extra["placement"], "slack": "x"}})
    with pytest.raises(InstanceError, match="placement.slack"):
        model_from_instance(bad)


def test_time_limit_returns_best_found_and_bound():
    rng = random.Random(7)
    inst = aladdin_instance(random_requests(rng, 40))
    r = solve_placement(offline_problem(inst), "cpsat", budget=TimeBudget.of(0.05))
    assert r.status in ("optimal", "time_limit")
    assert r.assignment and r.bound is not None and r.bound <= r.workers


def test_infeasible_max_workers():
    inst = load_instance("aladdin-fig3")
    problem = replace(offline_problem(inst), max_workers=1)
    assert solve_placement(problem).status == "infeasible"
    assert registered_solve("aladdin", inst.with_requests(inst.requests), {}).status == "optimal"


def test_gurobi_backend_agrees_or_reports_licence():
    pytest.importorskip("gurobipy", reason="gurobipy not installed")
    inst = load_instance("aladdin-fig3")
    r = registered_solve("aladdin", inst, {"solver": "gurobi"})
    if r.status == "unsupported":
        assert "licen" in r.message
    else:
        assert r.status == "optimal" and r.objective == 2 and max(r.extra["peak_kv_model"]) == 7
    rng = random.Random(21)
    problem = offline_problem(aladdin_instance(random_requests(rng, 7)))
    assert solve_placement(problem, "gurobi").workers == solve_placement(problem, "cpsat").workers


def test_stopped_mip_worse_than_best_fit_gives_best_fit(monkeypatch):
    """The PuLP backends get no hint: a stopped MIP's incumbent may use more workers than best fit.
    Planted here (every request on a fresh worker of its own, status ``time_limit``): the result is
    best fit's placement, which was ignored whenever the solver had any incumbent."""
    import optsched.problems.aladdin.exact as exact

    rng = random.Random(2)
    problem = offline_problem(aladdin_instance(random_requests(rng, 12)))  # best fit 6 workers, optimum 5
    called = []

    def one_worker_each(cp, jobs, md, solver, budget, threads):
        called.append(True)
        return "time_limit", {j: md.n_exist + k for k, j in enumerate(jobs)}, None

    monkeypatch.setattr(exact, "_solve_pulp", one_worker_each)
    r = solve_placement(problem, "highs", budget=TimeBudget.of(30))
    bf = best_fit(problem)
    assert called and bf.workers < len(problem.new)  # the solver ran; its planted incumbent is worse
    assert r.workers == bf.workers and r.status in ("time_limit", "optimal")
    assert check_placement(compile_problem(problem), r.assignment, exempt=r.unplaceable) == []


def _overflowing_heartbeat() -> PlacementProblem:
    """aladdin-fig3's requests on one worker: best fit overflows, the exact model is infeasible."""
    problem = replace(offline_problem(load_instance("aladdin-fig3")), max_workers=1)
    assert best_fit(problem).unplaceable  # a fixed W too small: best fit's overflow rule (A12)
    return problem


@pytest.mark.parametrize("stop", ["solver", "build"])
def test_solve_stopped_without_a_placement_places_every_request(monkeypatch, stop):
    """A solve stopped before any placement was found (CP-SAT stopped with no solution, planted; or
    the build stopped by a zero time limit) at a fixed W that best fit overflows: the answer is best
    fit's placement with its overflows, status time_limit. It was no placement at all, reported
    optimal (workers 0 <= bound), and the cluster simulator dropped those requests."""
    import optsched.problems.aladdin.exact as exact

    problem = _overflowing_heartbeat()
    if stop == "solver":
        monkeypatch.setattr(exact, "_solve_cpsat", lambda *args: ("time_limit", {}, None))
    r = solve_placement(problem, "cpsat", budget=NO_LIMIT if stop == "solver" else TimeBudget.of(0.0))
    assert set(r.assignment) == {job.id for job in problem.new}
    assert r.status == "time_limit"
    assert set(best_fit(problem).unplaceable) <= set(r.unplaceable)
    assert r.workers == 1


@pytest.mark.parametrize("seed", range(6))
def test_requests_that_fit_no_worker_count_one_worker_in_every_bound(seed):
    """A request whose KV alone exceeds M gets a worker of its own: every proven bound counts it as
    one worker (the knapsack bounds summed its KV, and a 10^9-unit request gave a bound of 10^8
    workers above the answer of 20)."""
    rng = random.Random(300 + seed)
    inst = aladdin_instance(random_requests(rng, rng.randint(6, 12)), kv=60)
    placement = {**inst.extra["placement"], "kv_capacity": rng.choice([12, 20, 30])}
    if seed % 2:
        placement["kv_per_request"] = 10**9 if seed == 5 else rng.randint(1, 8)
    small = replace(inst, extra={**inst.extra, "placement": placement})
    problem = offline_problem(small)
    results = [solve_placement(problem, s) for s in ("cpsat", "highs")]
    assert results[0].workers == results[1].workers
    answer = results[0].workers
    if seed == 5:
        assert len(results[0].unplaceable) == len(problem.new) == answer  # every request alone
    assert best_fit(problem).workers >= answer
    for r in results:
        assert r.status == "optimal" and r.bound == answer
    bounds = registered_bounds("aladdin", small, {})
    assert bounds and all(b.value <= answer for b in bounds if b.valid), [(b.name, b.value) for b in bounds]
