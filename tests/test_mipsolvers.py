"""The shared PuLP adapter (optsched.mipsolvers)."""

from __future__ import annotations

import pulp
import pytest

from optsched.budget import TimeBudget
from optsched.mipsolvers import MIP_BACKENDS, pulp_solver
from tests.support.solving import registered_solve


def _solve(backend: str, threads: int | None, warm: bool = False) -> tuple[int, float]:
    # min x + y  s.t.  x + 2y >= 3.5, x, y integer in [0, 10]: optimum 2 (x = 0, y = 2)
    prob = pulp.LpProblem("tiny", pulp.LpMinimize)
    x = prob.add_variable("x", 0, 10, cat="Integer")
    y = prob.add_variable("y", 0, 10, cat="Integer")
    prob += x + y
    prob += x + 2 * y >= 3.5
    if warm:
        x.setInitialValue(4)
        y.setInitialValue(0)
    prob.solve(pulp_solver(backend, budget=TimeBudget.of(30), threads=threads, warm_start=warm))
    return prob.sol_status, pulp.value(prob.objective)


def test_highs_survives_thread_counts_changing_within_one_process():
    """HiGHS sizes one process-wide thread pool on its first solve; PuLP passing another count later
    made that solve come back 'Not Solved'. The adapter never passes threads to HiGHS."""
    for threads in (None, 2, 1, 2):
        assert _solve("highs", threads) == (pulp.LpSolutionOptimal, 2.0)


@pytest.mark.parametrize("backend", ["highs", "cbc"])
def test_warm_start_keeps_the_optimum(backend):
    assert _solve(backend, 1, warm=True) == (pulp.LpSolutionOptimal, 2.0)


def test_unknown_backend_is_named():
    with pytest.raises(ValueError, match="known: " + ", ".join(MIP_BACKENDS)):
        pulp_solver("cplex")


def test_solver_budget_leaves_the_handover() -> None:
    from optsched.mipsolvers import HANDOVER_PER_BUILD, solver_budget

    assert solver_budget(TimeBudget(), 5.0) == TimeBudget()
    assert solver_budget(TimeBudget(100.0), 2.0).end == pytest.approx(100.0 - 2.0 * HANDOVER_PER_BUILD)


def test_no_solver_is_started_without_time_for_the_handover(monkeypatch) -> None:
    """With no time left for the hand-over every PuLP path keeps its heuristic's answer (a solver
    started anyway ran 4.7 s past a 0.6 s remainder on a 30-request hybrid MIP)."""
    import random

    import optsched.mipsolvers as mipsolvers
    from optsched.problems.hybrid.pcmax import loads_of, lpt, solve_pcmax
    from tests.support.infermax import tiny_instance

    monkeypatch.setattr(mipsolvers, "HANDOVER_PER_BUILD", 1e9)
    rng = random.Random(4)
    p, m = [rng.randint(1, 30) for _ in range(15)], 4
    pcmax = solve_pcmax(p, m, method="mip", budget=TimeBudget.of(30))
    assert pcmax.makespan == max(loads_of(p, lpt(p, m), m)) and pcmax.bound <= pcmax.makespan
    inst = tiny_instance(5)  # its best policy is above the bound: the model would be built
    res = registered_solve("infermax", inst, {"solver": "highs", "time_limit": 30, "early_exit": False})
    assert res.extra["stopped"].startswith("MIP not solved") and res.replay.feasible
    assert res.objective == pytest.approx(min(res.extra["policy_values"].values()), rel=1e-12)


@pytest.mark.parametrize("known_feasible", [True, False])
def test_solve_model_solves_again_without_presolve(monkeypatch: pytest.MonkeyPatch, known_feasible: bool) -> None:
    """A planted HiGHS presolve fault (the first solve says infeasible): with a known solution the
    model is solved again with presolve off; without one the answer stands."""
    from optsched.mipsolvers import PRESOLVE_OFF_NOTE, solve_model

    prob = pulp.LpProblem("tiny", pulp.LpMinimize)
    x = prob.add_variable("x", 0, 10, cat="Integer")
    prob += x
    prob += x >= 3
    real, seen = pulp.LpProblem.solve, []

    def faulty(self, solver=None, **kwargs):
        seen.append(dict(solver.optionsDict))
        real(self, solver, **kwargs)
        if len(seen) == 1:
            self.status = pulp.LpStatusInfeasible
        return self.status

    monkeypatch.setattr(pulp.LpProblem, "solve", faulty)
    code, note = solve_model(prob, pulp_solver("highs"), known_feasible=known_feasible)
    if known_feasible:
        assert (code, note, pulp.value(prob.objective)) == (pulp.LpStatusOptimal, PRESOLVE_OFF_NOTE, 3.0)
        assert seen == [{}, {"presolve": "off"}]
    else:
        assert (code, note, len(seen)) == (pulp.LpStatusInfeasible, None, 1)
