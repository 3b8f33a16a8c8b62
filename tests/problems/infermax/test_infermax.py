"""InferMax model: both backends against an independent exhaustive search, bounds, options, policies.

The exhaustive search (tests/support/infermax_bruteforce.py) is a shortest path over per-request states
written from the contract alone. On 32 random tiny instances (N <= 3, I, O <= 4, varied C, P, M,
R_max, both cost profiles) CP-SAT and (on the smaller models) a MIP backend (Gurobi under its restricted licence when
the model fits, else HiGHS) must reach the exhaustive optimum with and without evictions; the bound
must not exceed it; no policy may beat it. HiGHS and CBC are cross-checked on a smaller set here and
on all 32 instances in tests/benchmarks/bench_infermax.py (``crosscheck``), which is slower; the
MIP runs in the unit tests where the model is small (MIP_CELLS).
"""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from optsched.instance import parse_instance
from optsched.policies import simulator_for
from optsched.result import replayed_objective
from optsched.schedule import replay
from tests.support.infermax import (
    ADVERSARIAL_COSTS,
    REL,
    check_result,
    policy_schedules,
    policy_values,
    solve,
    solve_mip,
    tiny_instance,
)
from tests.support.infermax_bruteforce import exhaustive_makespan
from tests.support.solving import registered_bounds

#: The MIP (big-M, time-indexed) is far slower than CP-SAT; in the unit tests it runs where the
#: model is small (N * J <= MIP_CELLS); tests/benchmarks/bench_infermax.py crosscheck runs all 32.
MIP_CELLS = 16


@pytest.mark.parametrize("seed", range(32))
def test_backends_reach_exhaustive_optimum(seed: int) -> None:
    inst = tiny_instance(seed)
    for no_evict in (False, True):
        best, path = exhaustive_makespan(inst, evict=not no_evict)
        assert replay(inst, path).metrics.makespan == pytest.approx(best, rel=1e-12)
        runs = [solve(inst, no_evict=no_evict)]
        if len(inst.requests) * runs[0].extra["horizon"] <= MIP_CELLS:
            runs.append(solve_mip(inst, no_evict=no_evict))
        for res in runs:
            check_result(inst, res, best)
            if no_evict:
                assert res.replay.metrics.evictions == 0
        for name, value in policy_values(inst, evictions=not no_evict).items():
            assert best <= value * (1 + 1e-9), name
        for b in registered_bounds("infermax", inst, {}):
            assert b.valid and b.value <= best * (1 + 1e-9)


@pytest.mark.parametrize("seed", [3, 8, 13])
def test_highs_and_cbc_agree_with_cpsat(seed: int) -> None:
    inst = tiny_instance(seed, n_max=2)
    ref = solve(inst)
    for solver in ("highs", "cbc"):
        res = solve(inst, solver=solver)
        check_result(inst, res, ref.objective)


@pytest.mark.parametrize("seed", [1, 4, 6, 9])
def test_no_hybrid_and_no_chunk_match_exhaustive(seed: int) -> None:
    inst = tiny_instance(seed)
    for flags in ({"no_hybrid": True}, {"no_chunk": True}, {"no_hybrid": True, "no_evict": True}):
        found = exhaustive_makespan(
            inst,
            evict=not flags.get("no_evict", False),
            chunk=not flags.get("no_chunk", False),
            hybrid=not flags.get("no_hybrid", False),
        )
        res = solve(inst, **flags)
        if found is None:
            assert res.status == "infeasible" and res.schedule is None
            continue
        check_result(inst, res, found[0])
        rep = res.replay
        if flags.get("no_hybrid"):
            assert all(p == 0 or d == 0 for p, d in zip(rep.prefill_tokens, rep.decode_items))


@pytest.mark.parametrize("objective", ["latency", "ttft"])
@pytest.mark.parametrize("seed", [2, 11])
def test_other_objectives_backends_agree(objective: str, seed: int) -> None:
    inst = tiny_instance(seed)
    a = solve(inst, objective=objective)
    b = solve_mip(inst, objective=objective)
    check_result(inst, a, None, objective)
    check_result(inst, b, None, objective)
    if objective == "latency":
        assert a.status == b.status == "optimal"
        assert a.objective == pytest.approx(b.objective, rel=REL)
    else:  # ttft: optimal only relative to the horizon unless the work bound closes the gap
        for res in (a, b):
            assert res.status == "optimal" or res.extra.get("optimal_within_horizon"), res.extra
        assert a.objective == pytest.approx(b.objective, rel=REL)
    for name, value in policy_values(inst, objective).items():
        assert a.objective <= value * (1 + 1e-9), name


@pytest.mark.parametrize("seed", [0, 12, 21])
def test_online_arrivals(seed: int) -> None:
    inst = tiny_instance(seed, arrivals=True)
    a = solve(inst)
    b = solve_mip(inst)
    check_result(inst, a, None)
    check_result(inst, b, None)
    assert a.status == b.status == "optimal"
    assert a.objective == pytest.approx(b.objective, rel=REL)
    for name, value in policy_values(inst).items():
        assert a.objective <= value * (1 + 1e-9), name


def test_impossible_prefill_is_infeasible() -> None:
    inst = parse_instance(
        {
            "name": "x",
            "cost_model": "llama2-7b-a100",
            "limits": {"token_budget": 4, "prefill_budget": 2},
            "requests": [{"id": "a", "prompt_tokens": 3, "output_tokens": 2}],
        },
        "x",
    )
    res = solve(inst, no_chunk=True)
    assert res.status == "infeasible" and "'a'" in res.message


def test_short_horizon_is_never_optimal() -> None:
    inst = tiny_instance(5)
    res = solve(inst, horizon=1)
    assert res.status == "infeasible" and "horizon" in res.message
    full = solve(inst)
    res = solve(inst, horizon=full.extra["horizon"] + 2)
    assert res.status == "optimal"  # a longer forced horizon keeps the proof


def test_bad_options_are_named() -> None:
    inst = tiny_instance(1)
    with pytest.raises(ValueError, match="solver"):
        solve(inst, solver="nope")
    with pytest.raises(ValueError, match="objective"):
        solve(inst, objective="nope")


def test_cli_solve_json(tmp_path: Path) -> None:
    inst = tiny_instance(4)
    path = tmp_path / "inst.json"
    path.write_text(json.dumps(inst.to_dict()))
    out = tmp_path / "sched.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "optsched",
            "solve",
            str(path),
            "--problem",
            "infermax",
            "--json",
            "--threads",
            "1",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["status"] == "optimal" and data["gap"] == pytest.approx(0.0, abs=1e-9)
    assert out.exists()


def _fixed_model_value(inst, schedule) -> float | None:
    """Makespan of the CP-SAT model with every c and e fixed to ``schedule`` (None: infeasible).

    The model keeps every row (R1-R8, least batch counts, the horizon cap) except symmetry breaking,
    which may legitimately exclude a schedule that finishes identical requests in the other order.
    """
    import dataclasses

    from ortools.sat.python import cp_model

    from optsched.problems.infermax.cpsat import ModelBuilder
    from optsched.problems.infermax.data import build_data, integer_scaling
    from optsched.problems.infermax.model import InferMaxOptions
    from optsched.problems.infermax.schedules import hint_from_schedule

    value = replayed_objective(inst, schedule, "makespan")[0]
    n_batches = sum(1 for b in schedule.batches if b.items)
    data = build_data(inst, InferMaxOptions(), value, value, n_batches)
    data = dataclasses.replace(data, symmetric_pairs=())
    c, e = hint_from_schedule(data, schedule)
    b = ModelBuilder(data, integer_scaling(data))
    for i in range(data.N):
        for j in range(data.J):
            b.m.Add(b.c[i][j] == c[i][j])
            b.m.Add(b.e[i][j] == e[i][j])
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    if solver.Solve(b.m) != cp_model.OPTIMAL:
        return None
    return solver.ObjectiveValue() / 10 ** integer_scaling(data).power


@pytest.mark.parametrize("seed", range(0, 32, 3))
def test_every_legal_schedule_is_a_model_solution(seed: int) -> None:
    """No row of the model (the valid redundant rows R1-R8 and least batch counts included) cuts
    off a schedule that replays cleanly: the exhaustive optimum (with and without evictions) and
    every policy's schedule are solutions at their replayed makespan."""
    inst = tiny_instance(seed)
    scheds = {f"exhaustive-evict={ev}": exhaustive_makespan(inst, evict=ev)[1] for ev in (True, False)}
    for name, sched in {**scheds, **policy_schedules(inst)}.items():
        value = _fixed_model_value(inst, sched)
        assert value is not None, name
        assert value == pytest.approx(replayed_objective(inst, sched, "makespan")[0], rel=1e-9), name


def _least_bins(heights: list[int], capacity: int) -> int:
    """Exact bin packing by brute force (tiny inputs only)."""
    best = len(heights)

    def place(k: int, loads: list[int]) -> None:
        nonlocal best
        if len(loads) >= best:
            return
        if k == len(heights):
            best = len(loads)
            return
        for b in range(len(loads)):
            if loads[b] + heights[k] <= capacity:
                loads[b] += heights[k]
                place(k + 1, loads)
                loads[b] -= heights[k]
        place(k + 1, loads + [heights[k]])

    place(0, [])
    return best


@pytest.mark.parametrize("seed", range(40))
def test_packing_bound_never_exceeds_exact_bin_packing(seed: int) -> None:
    from optsched.bounds import packing_bound

    rng = random.Random(seed)
    M = rng.randint(4, 20)
    heights = sorted((rng.randint(1, M) for _ in range(rng.randint(1, 8))), reverse=True)
    exact = _least_bins(heights, M)
    assert math.ceil(sum(heights) / M) <= packing_bound(heights, M) <= exact


@pytest.mark.parametrize("seed", range(20))
def test_packing_bound_of_small_items_is_the_area_count(seed: int) -> None:
    """Items all at most M/2: the histogram's L2 (every alpha) equals the area count, the shortcut
    that spares a histogram of M + 1 entries."""
    from optsched.bounds import packing_from_counts

    rng = random.Random(seed)
    M = rng.randint(2, 60)
    heights = [rng.randint(1, M // 2) for _ in range(rng.randint(1, 30))]
    counts = np.bincount(heights, minlength=M + 1)
    assert packing_from_counts(counts, M) == math.ceil(sum(heights) / M)


def test_bounds_with_a_huge_kv_capacity() -> None:
    """kv_capacity = 10^12 ("unlimited" written as a number): the bounds allocated a histogram of
    M + 1 entries (7 TiB) and failed; now they are the area count, below a policy's makespan."""
    from optsched.bounds import generic_bounds

    inst = parse_instance({**tiny_instance(0).to_dict(), "limits": {"kv_capacity": 10**12}}, "huge-M")
    makespan = replayed_objective(inst, simulator_for("vllm")(inst), "makespan")[0]
    for bound in generic_bounds(inst):
        assert bound.value <= makespan * (1 + 1e-9), bound.name


@pytest.mark.parametrize("seed", range(12))
def test_bound_below_exhaustive_optimum_under_adversarial_costs(seed: int) -> None:
    base = tiny_instance(seed).to_dict()
    for cost in ADVERSARIAL_COSTS:
        inst = parse_instance({**base, "cost_model": cost}, f"adv-{seed}")
        for evict in (True, False):
            best = exhaustive_makespan(inst, evict=evict)[0]
            for b in registered_bounds("infermax", inst, {}):
                assert b.value <= best * (1 + 1e-9), (cost, evict)
