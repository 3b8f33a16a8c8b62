"""G-maximisation's exact solve (gmax/exact.py): Dinkelbach, fixed-n and branch-and-bound against
the exhaustive optimum on every backend, the model check, time limits and the bounds they claim."""

import time

import pytest

from optsched.budget import TimeBudget
from optsched.instance import parse_instance
from optsched.problems.gmax.exact import make_backend, solve_exact
from optsched.problems.gmax.problem import GmaxProblem, evaluate_g, g_core, g_value
from optsched.problems.gmax.sa import (
    SAParams,
    local_search,
    simulated_annealing,
    start_points,
)
from optsched.problems.gmax.slots import SlotData
from optsched.result import Status
from tests.support.gmax import TOYS, canonical, small_instance, toy
from tests.support.gmax_generate import random_gmax_instance
from tests.support.static_exhaustive import exhaustive_g, ordered_partitions


@pytest.mark.parametrize("name", sorted(TOYS))
@pytest.mark.parametrize("solver", ["highs", "cpsat", "cbc"])
@pytest.mark.parametrize("method", ["dinkelbach", "fixed-n", "bnb"])
def test_toy_examples_solved_exactly(name, solver, method):
    best, g_star, _ = TOYS[name]
    p = toy(name)
    res = solve_exact(p, make_backend(p, solver), method)
    assert res.status == "optimal"
    assert canonical(p, res.batches) == best
    assert res.G == pytest.approx(g_star, rel=1e-9)
    assert res.bound == pytest.approx(g_star, rel=1e-6)
    assert exhaustive_g(p)[0] == pytest.approx(g_star, rel=1e-12)


def test_model_check_accepts_slack_in_t_but_not_a_shortfall():
    """A stopped MILP's incumbent may carry slack in its durations and starts (bounded from below
    only): a model t above the evaluated one is accepted (it was an internal error), one below is not,
    and a model n above the evaluated one is not."""
    from optsched.problems.gmax.exact import check_model
    from optsched.problems.gmax.slots import SubResult

    p = GmaxProblem.from_instance(parse_instance(random_gmax_instance(6, 1)))
    batches = [[0, 1], [2, 3, 4], [5]]
    n, t = g_core(p, batches)
    check_model(p, SubResult(status=Status.FEASIBLE, batches=batches, n=n, t=t * 1.05), "slack")
    check_model(p, SubResult(status=Status.FEASIBLE, batches=batches, n=max(n - 1, 0), t=t), "an on-time flag off")
    with pytest.raises(RuntimeError, match="below the evaluated"):
        check_model(p, SubResult(status=Status.FEASIBLE, batches=batches, n=n, t=t * 0.95), "shortfall")
    with pytest.raises(RuntimeError, match="claims n"):
        check_model(p, SubResult(status=Status.FEASIBLE, batches=batches, n=n + 1, t=t), "n too large")


@pytest.mark.parametrize("seed", range(50))
def test_exact_equals_exhaustive_and_beats_sa(seed):
    p = small_instance(seed)
    g_ex, _, _ = exhaustive_g(p)
    solver, method = [("highs", "dinkelbach"), ("cpsat", "fixed-n"), ("highs", "fixed-n"), ("cpsat", "dinkelbach")][
        seed % 4
    ]
    res = solve_exact(p, make_backend(p, solver), method)
    assert res.status == "optimal"
    assert res.G == pytest.approx(g_ex, rel=1e-9)
    assert res.bound >= g_ex * (1 - 1e-9)
    assert evaluate_g(p, res.batches).G == res.G
    sa = simulated_annealing(p, SAParams(seed=seed, iters=20))
    assert sa.G <= g_ex * (1 + 1e-12)
    for start in start_points(p):
        assert g_value(*g_core(p, start)) <= g_ex * (1 + 1e-12)


def test_gurobi_backend_or_clear_licence_message():
    pytest.importorskip("gurobipy")
    p = toy("fig4-batch-size")
    try:
        res = solve_exact(p, make_backend(p, "gurobi"), "dinkelbach")
    except RuntimeError as exc:  # no licence at all, or the size-limited one exceeded
        assert "Gurobi" in str(exc)
        pytest.skip(f"Gurobi unavailable: {exc}")
    assert res.status == "optimal" and res.G == pytest.approx(3 / 1.8)
    big = GmaxProblem.from_instance(parse_instance(random_gmax_instance(12, 0)))
    with pytest.raises(RuntimeError, match="restricted licence"):
        solve_exact(big, make_backend(big, "gurobi"), "dinkelbach", budget=TimeBudget.of(30))


def test_time_limited_runs_claim_no_bound_they_did_not_prove():
    # CP-SAT stopped before any search reports a best bound of 0 for n - lambda t, which is no proof;
    # HiGHS stopped early has no dual bound, so the LP relaxations supply it
    p = GmaxProblem.from_instance(parse_instance(random_gmax_instance(12, 0)))
    exact = solve_exact(p, make_backend(p, "highs"), "dinkelbach")
    assert exact.status == "optimal"
    for solver in ("cpsat", "highs"):
        for method in ("dinkelbach", "fixed-n"):
            res = solve_exact(p, make_backend(p, solver), method, budget=TimeBudget.of(0.01))
            assert res.bound >= exact.G * (1 - 1e-9)
            assert res.status == "time_limit" or res.G == pytest.approx(exact.G, rel=1e-9)


@pytest.mark.parametrize("seed", [1, 2])
def test_bounds_of_interrupted_dinkelbach_runs_hold(seed):
    """Whatever step a time limit interrupts, the bound kept (least over the steps, with the LP
    bound on t) is never below the proven optimum."""
    p = GmaxProblem.from_instance(parse_instance(random_gmax_instance(14, seed)))
    exact = solve_exact(p, make_backend(p, "highs"), "dinkelbach")
    assert exact.status == "optimal"
    statuses = set()
    for limit in (0.2, 1.0):
        res = solve_exact(p, make_backend(p, "highs"), "dinkelbach", budget=TimeBudget.of(limit))
        statuses.add(res.status)
        assert res.bound >= exact.G * (1 - 1e-9), (limit, res.log)
        assert res.G <= exact.G * (1 + 1e-9)
    assert "time_limit" in statuses  # the limits did interrupt a step


def test_no_dinkelbach_step_starts_that_cannot_be_set_up_before_the_limit():
    """A step whose set-up (model build, loading) alone would pass the limit is not started."""

    from optsched.problems.gmax.exact import BestSchedule, run_dinkelbach
    from optsched.problems.gmax.slots import SubResult

    p = small_instance(4)
    by_g = {g_value(*g_core(p, b)): b for b in ordered_partitions(p)}
    ranked = [by_g[g] for g in sorted(by_g) if g > 0]  # strictly increasing G

    class SlowSetUp:  # 0.2 s outside the solver per step, then a better schedule, "feasible"
        hint = None

        def __init__(self):
            self.calls = 0

        def parametric(self, n_inc, batches_inc, deadline):
            self.calls += 1
            time.sleep(0.2)
            better = ranked[min(self.calls, len(ranked) - 1)]
            n, t = g_core(p, better)
            return SubResult(
                status=Status.FEASIBLE, batches=better, n=n, t=t, objective=0.0, wall=0.0, info={"lambda": n_inc / t}
            )

    inc = BestSchedule(p)
    inc.offer(ranked[0])
    backend = SlowSetUp()
    budget = TimeBudget.of(1.1)
    status, _ = run_dinkelbach(p, backend, inc, budget, t_lb=1.0, log=[])
    assert status == "time_limit"
    assert not budget.expired()  # without the check a fifth step would run past it
    assert backend.calls >= 2


@pytest.mark.parametrize("seed", range(30))
def test_branch_and_bound_equals_exhaustive(seed):
    p = small_instance(seed)
    g_ex, _, _ = exhaustive_g(p)
    res = solve_exact(p, make_backend(p, "highs"), "bnb")
    assert res.status == "optimal"
    assert res.G == pytest.approx(g_ex, rel=1e-9)
    assert res.bound >= g_ex * (1 - 1e-9) and res.bound <= g_ex * (1 + 1e-6)
    assert evaluate_g(p, res.batches).G == res.G


def test_interrupted_branch_and_bound_returns_a_valid_bound():
    p = GmaxProblem.from_instance(parse_instance(random_gmax_instance(12, 3)))
    exact = solve_exact(p, make_backend(p, "highs"), "bnb")
    assert exact.status == "optimal"
    for limit in (0.05, 0.5, 2.0):
        res = solve_exact(p, make_backend(p, "highs"), "bnb", budget=TimeBudget.of(limit))
        assert res.bound >= exact.G * (1 - 1e-9)
        assert res.G <= exact.G * (1 + 1e-9)
        assert res.status == "time_limit" or res.G == pytest.approx(exact.G, rel=1e-9)


@pytest.mark.parametrize("method", ["dinkelbach", "fixed-n"])
def test_no_model_is_built_after_the_time_limit(method):
    """With the limit already spent: no sub-solve starts, the local search stops, and the bound is
    the one that needs no solver (requests able to meet their SLO / least t); never a crash."""
    p = GmaxProblem.from_instance(parse_instance(random_gmax_instance(30, 3)))
    res = solve_exact(p, make_backend(p, "highs"), method, budget=TimeBudget.of(1e-9))
    assert res.status == "time_limit" and res.iterations == 0
    data = SlotData.build(p)
    assert res.bound == pytest.approx(int(data.can_meet.any(axis=1).sum()) / data.t_lower_bound(), rel=1e-12)
    assert res.bound >= res.G == evaluate_g(p, res.batches).G
    start = start_points(p)[0]
    assert local_search(p, start, TimeBudget.of(0.0)) == start
    assert local_search(p, start) != start
