"""InferMax under its limits: the time limit stops set-up work, ``max_cells`` stops huge models.

Whatever stops the solver, the result is the best candidate schedule (replayed) with the proven
bounds, never a crash, a hang or a wrong ``optimal``.
"""

import pytest

from optsched import load_instance, replay
from optsched.bounds import batch_counts, generic_bounds
from optsched.budget import NO_LIMIT, TimeBudget
from optsched.options import OptionError
from optsched.problems.infermax import candidates
from optsched.problems.infermax.candidates import initial_candidates, serial_batch_count
from optsched.problems.infermax.cpsat import solve_cpsat
from optsched.problems.infermax.data import build_data
from optsched.problems.infermax.mip import lp_relaxation_bound, solve_mip
from optsched.problems.infermax.model import InferMaxOptions
from optsched.result import replayed_objective
from tests.support.infermax import solve, tiny_instance
from tests.support.solving import registered_bounds, registered_solve


def check_fallback(inst, res, status: str) -> None:
    """The result of a solve whose model was not built: a replayed candidate and proven bounds."""
    assert res.status == status, res.extra
    assert "not built" in res.extra["stopped"]
    assert replay(inst, res.schedule).feasible
    assert res.objective == pytest.approx(replay(inst, res.schedule).metrics.makespan, rel=1e-12)
    assert res.bound == pytest.approx(max(b.value for b in generic_bounds(inst, "makespan")), rel=1e-12)
    assert res.objective == pytest.approx(min(res.extra["policy_values"].values()), rel=1e-12)


def test_model_above_max_cells_is_not_built() -> None:
    inst = tiny_instance(5)  # the best policy is 22 % above the bound: not optimal
    res = solve(inst, max_cells=10)
    check_fallback(inst, res, "feasible")
    assert "exceeds option 'max_cells' = 10" in res.extra["stopped"]
    limited = solve(inst, max_cells=10, time_limit=30)
    check_fallback(inst, limited, "time_limit")
    assert solve(inst, max_cells=10, solver="highs").extra["stopped"].startswith("MIP model not built")


def test_mip_cells_count_ten_times() -> None:
    inst = tiny_instance(5)
    cells = build_data(inst, InferMaxOptions.parse({}), 0.2, 0.2, 1).J * len(inst.requests)
    tight = build_data(inst, InferMaxOptions.parse({"max_cells": 10 * cells - 1, "solver": "highs"}), 0.2, 0.2, 1)
    assert "each counted 10 times" in solve_mip(tight, None).info["stopped"]
    assert "stopped" not in solve_cpsat(tight, None).info
    enough = build_data(inst, InferMaxOptions.parse({"max_cells": 10 * cells, "solver": "highs"}), 0.2, 0.2, 1)
    assert solve_mip(enough, None).status == "optimal"


def test_an_expired_budget_stops_the_build_of_both_backends() -> None:
    inst = tiny_instance(5)
    data = build_data(inst, InferMaxOptions.parse({}), 0.2, 0.2, 1)
    for backend in (solve_cpsat, solve_mip):
        res = backend(data, None, TimeBudget.of(0.0))
        assert res.status == "unknown" and res.c is None and res.bound is None
        assert res.info["stopped"].endswith("not built within the time limit")


def test_candidates_after_the_deadline() -> None:
    """Past the deadline only the warm-start policy, else the first policy that gives a candidate,
    runs; without a deadline every policy and ``serial`` do."""
    inst = load_instance("toy-4")
    opts = InferMaxOptions.parse({})
    everything = initial_candidates(inst, opts, NO_LIMIT).found
    assert "serial" in everything and len(everything) > 3
    passed = initial_candidates(inst, opts, TimeBudget.of(0.0)).found
    assert list(passed) == [next(iter(everything))]
    warm = list(everything)[-2]
    assert list(initial_candidates(inst, InferMaxOptions.parse({"warm_start": warm}), TimeBudget.of(0.0)).found) == [
        warm
    ]
    only_serial = initial_candidates(inst, InferMaxOptions.parse({"no_chunk": True}), TimeBudget.of(0.0)).found
    assert list(only_serial) == ["serial"]


def test_bad_max_cells_is_named() -> None:
    for bad in (0, -5, 2.5, True, "many"):
        with pytest.raises(OptionError, match="option 'max_cells'"):
            InferMaxOptions.parse({"max_cells": bad})


def test_lp_bound_is_listed_only_when_the_lp_is_solved_to_a_positive_value() -> None:
    """An LP stopped at its time limit bounds nothing (PuLP reports the stopped HiGHS as "Optimal"
    with objective 0); a model above ``max_cells`` is not built; the mean latency's LP (big-M event
    links) is 0: none of them is a bound, and ``bound --method lp`` lists none."""
    inst = load_instance("toy-4")
    solved = lp_relaxation_bound(inst, {})
    assert solved.valid and 0 < solved.value <= registered_solve("infermax", inst, {}).objective
    assert lp_relaxation_bound(inst, {}, TimeBudget.of(1e-6)) is None
    assert lp_relaxation_bound(inst, {"max_cells": 10}) is None
    assert lp_relaxation_bound(inst, {"objective": "latency"}) is None
    listed = registered_bounds("infermax", inst, {"objective": "latency", "method": "lp"})
    assert "lp-relaxation" not in {b.name for b in listed} and all(b.value > 0 for b in listed)


def test_no_model_when_a_candidate_meets_a_proven_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """toy-4: a policy's makespan is the work bound; CP-SAT's own bound does not close the gap
    within minutes, so without the early exit a solve without a time limit would not return.

    Whether the model is built is read from the solve's call to its backend (a spy that records the
    call and returns no solution), not from a clock: the same solve with ``early_exit`` off reaches
    the eviction-free model, then the full model with the policy's schedule as its warm start, and still
    returns that schedule as optimal."""
    import optsched.problems.infermax.solve as infermax
    from optsched.problems.infermax.cpsat import BackendResult
    from optsched.result import Status

    calls = []

    def backend(data, hint, budget):
        calls.append((data, hint, budget))
        return BackendResult(status=Status.UNKNOWN, info={"stopped": "test: the backend was called"})

    monkeypatch.setattr(infermax, "_run_backend", backend)
    inst = load_instance("toy-4")
    res = registered_solve("infermax", inst, {"threads": 1})  # no time limit: returns only because no model runs
    assert calls == []
    assert res.status == "optimal" and "meets a proven bound" in res.extra["stopped"]
    assert res.objective == pytest.approx(min(res.extra["policy_values"].values()), rel=1e-12)
    assert res.objective - res.bound <= 1e-9 * res.objective
    assert res.bound == pytest.approx(max(b.value for b in generic_bounds(inst, "makespan")), rel=1e-12)
    built = solve(inst)  # early_exit off: the solve goes on to the model
    assert [data.options.no_evict for data, _, _ in calls] == [True, False]  # the eviction-free phase, the model
    data, hint, budget = calls[-1]
    assert hint is not None and not budget.limited and data.horizon_proven
    assert built.extra["stopped"] == "test: the backend was called"
    assert built.status == "optimal" and built.objective == pytest.approx(res.objective, rel=1e-12)


@pytest.mark.parametrize("objective", ["ttft", "latency"])
def test_stopped_solve_never_reports_worse_than_the_best_candidate(objective: str) -> None:
    """A solver stopped before it reaches its hint (CP-SAT must rebuild the hint's times) may hold a
    worse incumbent than the best candidate; the result is then the candidate's schedule."""
    from tests.support.infermax import scale_instance

    inst = scale_instance(8, 0)
    res = solve(inst, objective=objective, time_limit=3)
    assert res.objective <= min(res.extra["policy_values"].values()) * (1 + 1e-12)
    assert res.objective == pytest.approx(replayed_objective(inst, res.schedule, objective)[0], rel=1e-12)
    assert res.bound <= res.objective


def test_a_long_serial_candidate_is_not_built_under_a_deadline(monkeypatch) -> None:
    """``serial`` has no clock inside (a full trace's has millions of batches): under a deadline it
    is built only up to SERIAL_MAX_BATCHES batches, or when no policy gave a schedule."""
    inst = load_instance("toy-4")
    opts = InferMaxOptions.parse({})
    far = TimeBudget.of(3600.0)
    assert "serial" in initial_candidates(inst, opts, far).found
    monkeypatch.setattr(candidates, "SERIAL_MAX_BATCHES", serial_batch_count(inst) - 1)
    assert "serial" not in initial_candidates(inst, opts, far).found
    assert "serial" in initial_candidates(inst, opts, NO_LIMIT).found  # no time limit: every candidate
    only_serial = initial_candidates(inst, InferMaxOptions.parse({"no_chunk": True}), far).found
    assert list(only_serial) == ["serial"]  # no policy applies: serial however long


def test_an_lp_relaxation_too_large_to_build_builds_no_serial_schedule(monkeypatch: pytest.MonkeyPatch) -> None:
    """N times the least batch count is at most N x J: above ``max_cells`` the LP is not built, and
    neither is the serial schedule that sets J (seconds on gsm8k-like, beyond a short limit)."""
    from optsched.problems.infermax import mip

    inst = load_instance("toy-4")
    cells = len(inst.requests) * batch_counts(inst)[0] * mip.MIP_CELL_COST
    monkeypatch.setattr(mip, "serial_schedule", lambda *a, **k: pytest.fail("serial schedule built"))
    assert lp_relaxation_bound(inst, {"max_cells": cells - 1}) is None
