"""The InferMax MIP (problems/infermax/mip.py) against the exhaustive search where R_max binds.

Cost models dominated by the per-batch biases (a refill of I + g tokens cheaper than one decode
step) make the optimum evict and refill instead of decoding; with ``max_running`` 1 or 2 the
model's R_max rows (R5, R7 and the indicator mz) decide every batch. HiGHS's presolve declared
such a feasible model infeasible (exit 3, "InferMax model infeasible although 'hybrid' gives a
schedule within J = 7") while its rows were right; the MIP now states mz = [m-hat > 0] both
ways, as CP-SAT does, and solves again without presolve when HiGHS calls a model with a known
solution infeasible. These tests hold every MIP backend that runs here to the exhaustive optimum
and check that every legal schedule is a point of the MIP.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pulp
import pytest

from optsched.cli import main
from optsched.instance import Instance, parse_instance
from optsched.problems.infermax import mip
from optsched.problems.infermax.data import build_data
from optsched.problems.infermax.model import InferMaxOptions
from optsched.problems.infermax.schedules import hint_from_schedule
from optsched.result import replayed_objective
from optsched.schedule import replay
from tests.support.infermax_bruteforce import exhaustive_makespan
from tests.support.solving import registered_solve

#: The audit's profile: prefill bias 25 ms + 0.13 ms/token, decode bias 29 ms + 0.21 ms/token.
BIAS_DOMINATED = {
    "layers": 1,
    "prefill": {"bias": 0.025, "per_token": 1.3e-4},
    "decode": {"bias": 0.029, "per_token": 2.1e-4},
}
#: Biases again dominate, with a quadratic prefill term and KV reads (both phases' terms matter).
BIAS_QUADRATIC = {
    "layers": 2,
    "base": 1e-3,
    "prefill": {"bias": 0.01, "per_token": 2e-4, "per_token_sq": 1e-5},
    "decode": {"bias": 0.02, "per_token": 1e-4, "per_kv": 1e-5},
}
PROFILES = (BIAS_DOMINATED, BIAS_QUADRATIC, "llama2-7b-a100")


def audit_instance() -> Instance:
    """I = 3, O = 2, 2, 3; C = P = 4096, M unlimited, max_running 1, the bias-dominated profile."""
    return parse_instance(
        {
            "name": "bias3",
            "cost_model": BIAS_DOMINATED,
            "limits": {"token_budget": 4096, "prefill_budget": 4096, "kv_capacity": None, "max_running": 1},
            "requests": [
                {"id": "a", "prompt_tokens": 3, "output_tokens": 2},
                {"id": "b", "prompt_tokens": 3, "output_tokens": 2},
                {"id": "c", "prompt_tokens": 3, "output_tokens": 3},
            ],
        },
        "bias3",
    )


def running_instance(seed: int) -> Instance:
    """A random tiny instance with max_running 1 or 2 below N (N <= 3, I, O in 1..3) and a profile of
    :data:`PROFILES`."""
    rng = random.Random(seed)
    running = 1 + seed % 2
    reqs = [
        {"id": f"r{i}", "prompt_tokens": rng.randint(1, 3), "output_tokens": rng.randint(1, 3)}
        for i in range(rng.randint(running + 1, 3))
    ]
    need = max(r["prompt_tokens"] + r["output_tokens"] - 1 for r in reqs)
    C = rng.choice([3, 4, 4096])
    return parse_instance(
        {
            "name": f"running-{seed}",
            "cost_model": PROFILES[seed % len(PROFILES)],
            "limits": {
                "token_budget": C,
                "prefill_budget": rng.choice([p for p in (2, 3, 4096) if p <= C]),
                "kv_capacity": rng.choice([None, need, need + 2]),
                "max_running": running,
            },
            "requests": reqs,
        },
        f"running-{seed}",
    )


def solve(inst: Instance, **options):
    return registered_solve("infermax", inst, {"threads": 1, "early_exit": False, **options})


def assert_optimal(inst: Instance, res, best: float) -> None:
    assert res.status == "optimal", res.extra
    assert replay(inst, res.schedule).feasible
    assert res.objective == pytest.approx(best, rel=1e-9)
    assert res.bound <= res.objective * (1 + 1e-9)


def test_bias_dominated_max_running_1() -> None:
    """The audit's instance: every backend reaches the exhaustive optimum (refills, not decodes)."""
    inst = audit_instance()
    for evict in (True, False):
        best = exhaustive_makespan(inst, evict=evict)[0]
        for solver in ("highs", "cpsat") if evict else ("highs", "cbc", "cpsat"):  # CBC: 3x HiGHS's time
            assert_optimal(inst, solve(inst, solver=solver, no_evict=not evict), best)


def test_bias_dominated_cli_exit_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    path = tmp_path / "bias3.json"
    path.write_text(json.dumps(audit_instance().to_dict()))
    assert main(["solve", str(path), "--problem", "infermax", "--solver", "highs", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "optimal"
    assert out["objective"] == pytest.approx(exhaustive_makespan(audit_instance(), evict=True)[0], rel=1e-9)


@pytest.mark.parametrize("seed", range(6))
def test_mip_reaches_exhaustive_optimum_with_max_running(seed: int) -> None:
    inst = running_instance(seed)
    for evict in (True, False):
        best = exhaustive_makespan(inst, evict=evict)[0]
        assert_optimal(inst, solve(inst, solver="highs", no_evict=not evict), best)
    if seed < 2:  # CBC is slower; two instances, both R_max values
        assert_optimal(inst, solve(inst, solver="cbc"), exhaustive_makespan(inst, evict=True)[0])


def _fixed_mip_value(inst: Instance, schedule) -> float | None:
    """Makespan of the MIP with every c and e fixed to ``schedule`` (None: infeasible); HiGHS
    without presolve, symmetry breaking dropped (as tests/problems/infermax/test_infermax.py does for CP-SAT)."""
    value = replayed_objective(inst, schedule, "makespan")[0]
    n_batches = sum(1 for b in schedule.batches if b.items)
    data = dataclasses.replace(build_data(inst, InferMaxOptions(), value, value, n_batches), symmetric_pairs=())
    c, e = hint_from_schedule(data, schedule)
    model = mip.MipModel(data)
    for i in range(data.N):
        for j in range(data.J):
            model.c[i][j].lowBound = model.c[i][j].upBound = c[i][j]
            if not isinstance(model.e[i][j], int):
                model.e[i][j].lowBound = model.e[i][j].upBound = e[i][j]
    model.p.solve(pulp.HiGHS(msg=False, presolve="off"))
    if model.p.sol_status != pulp.LpSolutionOptimal:
        return None
    return float(pulp.value(model.p.objective)) / mip.UNIT


@pytest.mark.parametrize("seed", range(6))
def test_every_legal_schedule_is_a_mip_point(seed: int) -> None:
    """No row of the MIP cuts off the exhaustive optima (with and without evictions) at their makespan."""
    inst = audit_instance() if seed == 0 else running_instance(seed)
    for evict in (True, False):
        best, schedule = exhaustive_makespan(inst, evict=evict)
        assert _fixed_mip_value(inst, schedule) == pytest.approx(best, rel=1e-9)


def test_highs_infeasible_with_a_known_solution_is_solved_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A planted presolve fault: the first HiGHS solve says infeasible; the MIP solves again without
    presolve and reaches the optimum instead of reporting an infeasible model."""
    inst = audit_instance()
    real_solve = pulp.LpProblem.solve
    calls: list[dict] = []

    def faulty(self, solver=None, **kwargs):
        calls.append(dict(getattr(solver, "optionsDict", {}) or {}))
        if len(calls) == 1:
            real_solve(self, solver, **kwargs)
            self.status, self.sol_status = pulp.LpStatusInfeasible, pulp.LpSolutionInfeasible
            return self.status
        return real_solve(self, solver, **kwargs)

    value = exhaustive_makespan(inst, evict=False)[0]
    data = build_data(inst, InferMaxOptions(solver="highs", no_evict=True), value * 1.2, value * 1.2, 7)
    schedule = registered_solve("infermax", inst, {"no_evict": True}).schedule
    hint = hint_from_schedule(data, schedule)
    monkeypatch.setattr(pulp.LpProblem, "solve", faulty)
    res = mip.solve_mip(data, hint)
    assert len(calls) == 2 and calls[1].get("presolve") == "off"
    assert res.status == "optimal" and "presolve_off" in res.info
    assert res.objective == pytest.approx(value, rel=1e-9)
