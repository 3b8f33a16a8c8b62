"""The shared PuLP adapter (optsched.mipsolvers)."""

from __future__ import annotations

import pulp
import pytest

from optsched.mipsolvers import MIP_BACKENDS, pulp_solver


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
    prob.solve(pulp_solver(backend, time_limit=30, threads=threads, warm_start=warm))
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
