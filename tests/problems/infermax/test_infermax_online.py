"""InferMax's policy search (optsched/problems/infermax/online.py).

- Every neighbour of every named policy is a valid configuration one knob away, eviction-free under
  ``no_evict``; the adaptive prompt share is set, halved, doubled and dropped where the configuration
  takes it; the engine run in slices equals one run.
- The search's schedule replays cleanly, its value is the replay's, strictly below every seed, and
  it keeps its deadline; under ``no_evict`` its schedule has no eviction.
- A solve at scale on an instance with arrivals offers the search's schedule, names where its
  schedule came from (``schedule_source``, ``schedule_is_seed``) and never returns worse than
  its best policy.
- Without arrivals, mean latency runs the policy search before the segment lists (the makespan
  the segment lists alone), and the solve returns the better of their schedules.
- The report labels a seed the solver returns as ``solver:infermax = seed NAME`` and names the
  policy on a tie.
"""

from __future__ import annotations

import random
import time
from dataclasses import fields, replace

import pytest

from optsched.budget import NO_LIMIT, TimeBudget
from optsched.instance import parse_instance
from optsched.policies.config import POLICY_CONFIGS
from optsched.policies.engine import simulate
from optsched.problems.infermax.online import (
    MIN_RUNNING,
    PREFILL_SHARE,
    cap_neighbours,
    capped,
    neighbours,
    online_search,
    run_until,
)
from optsched.report.gather import build_report
from optsched.report.records import PolicyRun, Report, SolverRun
from optsched.result import SolveResult, objective_of
from optsched.schedule import replay
from optsched.workload import WorkloadTransforms, apply_transforms
from tests.support.solving import solver

solve = solver("infermax")


def online_instance(seed: int, n: int = 40, memory: float = 0.5):
    """``n`` requests arriving over about a second, I in 1..300, O in 1..60, M = ``memory`` of the need."""
    rng = random.Random(seed)
    t, reqs = 0.0, []
    for k in range(n):
        t += rng.expovariate(40.0)
        reqs.append({
            "id": f"r{k}",
            "arrival": round(t, 4),
            "prompt_tokens": rng.randint(1, 300),
            "output_tokens": rng.randint(1, 60),
        })
    need = [r["prompt_tokens"] + r["output_tokens"] - 1 for r in reqs]
    return parse_instance(
        {
            "name": f"online-{seed}",
            "cost_model": "llama2-7b-h200",
            "limits": {
                "token_budget": 512,
                "prefill_budget": 256,
                "kv_capacity": max(max(need), int(memory * sum(need))),
                "max_running": rng.choice([None, 8]),
            },
            "requests": reqs,
        },
        f"online-{seed}",
    )


def offline_instance(seed: int, n: int):
    """:func:`online_instance` with every request at time 0 (the ``offline`` transform)."""
    return apply_transforms(online_instance(seed, n), WorkloadTransforms(offline=True))


@pytest.mark.parametrize("name", sorted(POLICY_CONFIGS))
def test_neighbours_change_one_knob(name):
    config = POLICY_CONFIGS[name]
    for no_evict in (False, True):
        for other in neighbours(config, 256, no_evict, no_hybrid=False):
            changed = [
                f.name
                for f in fields(config)
                if f.name not in ("name", "eviction_free") and getattr(other, f.name) != getattr(config, f.name)
            ]
            assert len(changed) + (other.eviction_free != config.eviction_free) >= 1
            assert len(changed) <= 1
            assert other.eviction_free or not no_evict


def test_neighbours_set_halve_double_and_drop_the_prefill_share():
    def shares(config):
        return {c.prefill_share for c in neighbours(config, 4096, False, no_hybrid=False)}

    assert shares(POLICY_CONFIGS["sarathi-pc"]) == {None, PREFILL_SHARE}
    assert shares(replace(POLICY_CONFIGS["sarathi-pc"], prefill_share=3.0)) == {3.0, 1.5, 6.0, None}
    assert shares(POLICY_CONFIGS["vllm"]) == {None}  # prefill first: the share is refused there


def test_engine_in_slices_equals_one_run():
    inst = online_instance(3)
    for name in ("mc-sf", "srpf", "vllm"):
        assert run_until(inst, POLICY_CONFIGS[name], NO_LIMIT, 2.0) == simulate(inst, name)


@pytest.mark.parametrize("objective", ["latency", "ttft"])
@pytest.mark.parametrize("seed", [1, 2])
def test_search_beats_its_seeds_and_replays(objective, seed):
    inst = online_instance(seed)
    seeds = {name: objective_of(replay(inst, simulate(inst, name)), objective) for name in ("vllm", "sarathi", "mc-sf")}
    found = online_search(inst, objective, TimeBudget.of(20), list(seeds.items()))
    assert found.evaluated > 0
    if found.schedule is None:
        assert found.local_optimum  # nothing better in the whole neighbourhood of every seed
        return
    rep = replay(inst, found.schedule)
    assert rep.feasible, rep.violations[:3]
    assert objective_of(rep, objective) == pytest.approx(found.value, rel=1e-12)
    assert found.value < min(seeds.values())


def test_search_keeps_its_deadline_and_no_evict():
    inst = online_instance(5, n=120, memory=0.3)
    seeds = [(name, objective_of(replay(inst, simulate(inst, name)), "latency")) for name in ("vllm", "sarathi")]
    t0 = time.perf_counter()
    found = online_search(inst, "latency", TimeBudget.of(1.0, start=t0), seeds, no_evict=True)
    assert time.perf_counter() - t0 < 1.5
    if found.schedule is not None:
        assert replay(inst, found.schedule).metrics.evictions == 0
        assert found.config.eviction_free


def test_a_run_with_every_request_at_once_keeps_its_budget():
    """All requests at time 0: the engine's steps go on past the horizon (the last arrival + 1 s),
    so a run that does not end in time is stopped at its budget (a planted fault: one step to the
    end past the horizon)."""
    inst = offline_instance(12, n=3000)
    whole = time.perf_counter()
    assert run_until(inst, POLICY_CONFIGS["vllm"], NO_LIMIT, 1.0) is not None
    whole = time.perf_counter() - whole  # about 0.15 s on the 2-core development machine
    began = time.perf_counter()
    assert run_until(inst, POLICY_CONFIGS["vllm"], TimeBudget.of(whole / 8, start=began), 1.0) is None
    assert time.perf_counter() - began < whole


def test_solve_at_scale_with_arrivals_names_its_source():
    inst = online_instance(7, n=30)
    res = solve(inst, {"objective": "latency", "time_limit": 6})
    best_policy = min(v for k, v in res.extra["policy_values"].items() if k in POLICY_CONFIGS)
    assert res.objective <= best_policy
    assert replay(inst, res.schedule).feasible
    source = res.extra["schedule_source"]
    assert res.extra["schedule_is_seed"] == (source in POLICY_CONFIGS or source == "serial")
    assert "online_search" in res.extra["scale"]
    if source == "online-search":
        assert res.schedule.meta["method"] == "online-search"


@pytest.mark.parametrize("objective", ["latency", "makespan"])
def test_without_arrivals_mean_latency_runs_the_policy_search_before_the_segment_lists(objective):
    """Every request at time 0 (segment lists apply): for mean latency the policy search runs first
    and the segment-list search after it, the solve returning the better of their replayed schedules;
    for the makespan the segment lists alone."""
    inst = offline_instance(11, n=30)
    res = solve(inst, {"objective": objective, "time_limit": 8})
    scale = res.extra["scale"]
    assert ("online_search" in scale) == (objective == "latency")
    assert "plan_search_value" in scale
    rep = replay(inst, res.schedule)
    assert rep.feasible and objective_of(rep, objective) == pytest.approx(res.objective, rel=1e-9)
    found = [scale["plan_search_value"]]
    if objective == "latency" and scale["online_search"]["value"] is not None:
        found.append(scale["online_search"]["value"])
    assert res.objective <= min(found) + 1e-9


def test_report_labels_a_returned_seed_as_such():
    inst = online_instance(8, n=12)
    schedule = simulate(inst, "vllm")
    rep = replay(inst, schedule)
    value = objective_of(rep, "latency")
    result = SolveResult(problem="infermax", solver="cpsat", status="time_limit", objective=value, schedule=schedule)
    report = Report(inst, "latency", policies=[PolicyRun("vllm", "ok", value, schedule, rep)])
    report.solver = SolverRun("infermax", result, rep, seed="vllm")
    assert report.best[0] == "policy:vllm"
    labels = [c[0] for c in report.candidates()]
    assert "solver:infermax = seed vllm" in labels
    report.solver.seed = None
    assert report.best[0] == "solver:infermax"


def test_a_solve_past_its_deadline_still_has_its_first_policy_schedule():
    """A time limit too short for any policy: the first policy runs to its end (every solve answers
    a schedule and a bound), no other starts, status time_limit."""
    inst = online_instance(9, n=400)
    res = solve(inst, {"objective": "latency", "time_limit": 1e-3})
    assert res.schedule is not None and res.status == "time_limit"
    assert replay(inst, res.schedule).feasible and len(res.extra["policy_values"]) == 1
    assert res.bound is not None and res.bound <= res.objective


def test_report_names_the_solver_schedule_source():
    """The report's solver row says where its schedule came from: a seed (labelled ``= seed``,
    with why), the policy search (with its seed), or the model."""
    inst = online_instance(10, n=30)
    report = build_report(inst, objective="latency", time_limit=15, policies=["vllm", "sarathi", "mc-sf"])
    run = report.solver
    assert run is not None and run.result is not None and run.result.schedule is not None
    source = run.result.extra["schedule_source"]
    if run.result.extra["schedule_is_seed"]:
        assert run.seed == source and run.label == f"solver:infermax = seed {source}"
        assert run.message.startswith(f"no schedule better than seed {source} found in")
    else:
        assert run.seed is None and run.label == "solver:infermax"
        if source == "online-search":
            assert run.message.startswith("policy search from seed ")
    best = report.best
    assert best is not None and best[1] <= min(p.objective for p in report.policies if p.status == "ok")


def test_cap_neighbours_halve_and_double_within_r_max():
    inst = online_instance(4, n=40)  # R_max None or 8
    ceiling = min(inst.limits.max_running or 10**9, 40)
    assert cap_neighbours(None, inst) == [ceiling // 2]
    assert cap_neighbours(4, inst) == [None if 8 >= ceiling else 8]
    assert all(c is None or MIN_RUNNING <= c < ceiling for cap in (None, 4, 8, 16) for c in cap_neighbours(cap, inst))


@pytest.mark.parametrize("cap", [4, 8])
def test_a_capped_policy_schedule_replays_on_the_instance(cap):
    """A schedule run under a lower R_max is one of the instance, with at most ``cap`` requests holding KV."""
    inst = online_instance(6, memory=0.4)
    for name in ("mc-sf", "sarathi", "srpf-ef"):
        schedule = run_until(inst, POLICY_CONFIGS[name], NO_LIMIT, 2.0, cap)
        rep = replay(inst, schedule)
        assert rep.feasible, rep.violations[:3]
        assert replay(capped(inst, cap), schedule).feasible  # R_max = cap holds


def test_iterated_search_is_deterministic_and_never_worse_than_its_climbs():
    inst = online_instance(11, n=40)
    seeds = [(name, objective_of(replay(inst, simulate(inst, name)), "latency")) for name in ("sarathi", "mc-sf")]
    first = online_search(inst, "latency", TimeBudget.of(30), seeds)
    again = online_search(inst, "latency", TimeBudget.of(30), seeds)
    assert first.local_optimum and (first.value, first.evaluated) == (again.value, again.evaluated)
    assert first.value <= min(value for _, value in seeds)
    if first.schedule is not None:
        assert objective_of(replay(inst, first.schedule), "latency") == pytest.approx(first.value, rel=1e-12)
