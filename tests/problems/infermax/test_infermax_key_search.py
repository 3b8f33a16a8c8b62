"""InferMax's search over per-request priority keys (optsched/problems/infermax/key_search.py) and the
compiled engine's given ranks (optsched/policies/fastsim.py, ``rank``).

- Given ranks replace the order's key: the ranks of the order itself give the policy's schedule; with
  one request holding KV at a time and every arrival at 0 the requests finish in the given order.
- The search's schedule replays cleanly, its value is the replay's, it is never worse than its seeds
  (its start is the best seed's own schedule), it is deterministic, keeps a short budget, evicts nothing
  under ``no_evict`` and is never below the exhaustive optimum of tiny instances.
- A solve for mean latency at scale with arrivals runs it and is never worse than its schedule.
"""

from __future__ import annotations

import random
import time

import numpy as np
import pytest

from optsched.aotkernels import ahead_of_time
from optsched.budget import NO_LIMIT, TimeBudget
from optsched.instance import parse_instance
from optsched.policies.config import POLICY_CONFIGS
from optsched.policies.engine import simulate
from optsched.policies.fastsim import compiled_schedule, simulate_columns
from optsched.problems.infermax import key_search as key_search_module
from optsched.problems.infermax.key_search import KEY_SEARCH_SHARE, kept_for_key_search, key_search
from optsched.problems.infermax.online import capped
from optsched.result import objective_of
from optsched.schedule import Schedule, replay
from tests.problems.infermax.test_infermax_online import online_instance
from tests.support.bound_checks import TINY
from tests.support.infermax import tiny_instance
from tests.support.latency_bruteforce import exhaustive_mean
from tests.support.solving import solver

solve = solver("infermax")
SEEDS = ("mc-sf", "sarathi", "vllm")


def seed_points(names=SEEDS):
    return [(POLICY_CONFIGS[name], None) for name in names]


def seed_values(inst, names=SEEDS):
    return {name: objective_of(replay(inst, simulate(inst, name)), "latency") for name in names}


def test_the_orders_own_ranks_give_the_policys_schedule():
    inst = online_instance(2)
    config = POLICY_CONFIGS["rank-i"]  # static order: prompt length
    _, prompt, _ = inst.columns
    arrival = np.array([r.arrival for r in inst.requests])
    by_priority = np.lexsort((np.arange(len(prompt)), arrival, prompt))
    rank = np.empty(len(prompt), np.int64)
    rank[by_priority] = np.arange(len(prompt))
    given = simulate_columns(inst, config, rank=rank)
    own = compiled_schedule(inst, config)
    assert Schedule(inst.name, meta={}, columns=given).batches == own.batches


@pytest.mark.parametrize("groups", ["mc-sf", "rank-org", "vllm"])
def test_given_ranks_decide_the_service_order(groups):
    """All arrive at 0, one request holds KV at a time: they finish in the given order (a planted
    order, reversed and shuffled)."""
    inst = online_instance(3, n=12)
    inst = parse_instance(
        {
            "name": "order",
            "cost_model": "llama2-7b-h200",
            "limits": {"token_budget": 512, "prefill_budget": 256, "kv_capacity": 10**6},
            "requests": [
                {"id": r.id, "arrival": 0.0, "prompt_tokens": r.prompt_tokens, "output_tokens": r.output_tokens}
                for r in inst.requests
            ],
        },
        "order",
    )
    n = len(inst.requests)
    for rank in (np.arange(n)[::-1].copy(), np.random.default_rng(0).permutation(n)):
        columns = simulate_columns(capped(inst, 1), POLICY_CONFIGS[groups], rank=rank)
        rep = replay(inst, Schedule(inst.name, meta={}, columns=columns))
        assert rep.feasible, rep.violations[:3]
        finish = [rep.outcomes[r.id].finish for r in inst.requests]
        assert list(np.argsort(finish, kind="stable")) == list(np.argsort(rank))


@pytest.mark.parametrize("seed", [1, 2, 4])
def test_search_replays_and_is_never_worse_than_its_seeds(seed):
    inst = online_instance(seed)
    values = seed_values(inst)
    found = key_search(inst, "latency", TimeBudget.of(5), seed_points())
    assert found.start == pytest.approx(min(values.values()), rel=1e-12)  # the seeds' own schedules
    assert found.value <= found.start and found.evaluations > len(SEEDS)
    if found.schedule is not None:
        rep = replay(inst, found.schedule)
        assert rep.feasible, rep.violations[:3]
        assert objective_of(rep, "latency") == pytest.approx(found.value, rel=1e-12)
        assert found.value < min(values.values())
        assert found.schedule.meta["method"] == "key-search"
        assert sorted(found.schedule.meta["priority"]) == sorted(r.id for r in inst.requests)


def test_search_gains_on_a_loaded_instance():
    """Requests arriving faster than served, FCFS-like seeds: reordering them lowers the mean latency."""
    inst = online_instance(12, n=60, memory=0.3)
    found = key_search(inst, "latency", TimeBudget.of(10), seed_points(("vllm", "sarathi")))
    assert found.schedule is not None and found.value < found.start


def test_search_is_deterministic_and_ends_by_itself(monkeypatch):
    monkeypatch.setattr(key_search_module, "ROUNDS", 3)  # fewer returns to the best: a short test
    inst = online_instance(11, n=25)
    first = key_search(inst, "latency", NO_LIMIT, seed_points())
    again = key_search(inst, "latency", NO_LIMIT, seed_points())
    assert (first.value, first.evaluations) == (again.value, again.evaluations)
    assert [v for _, v in first.history] == [v for _, v in again.history]


def test_search_keeps_a_short_budget_and_no_evict():
    inst = online_instance(5, n=120, memory=0.3)
    t0 = time.perf_counter()
    found = key_search(inst, "latency", TimeBudget.of(1.0, start=t0), seed_points(), no_evict=True)
    assert time.perf_counter() - t0 < 1.5  # the final replay included
    if found.schedule is not None:
        assert replay(inst, found.schedule).metrics.evictions == 0
    expired = key_search(inst, "latency", TimeBudget.of(0.0), seed_points())
    assert expired.schedule is None


def test_search_starts_no_evaluation_that_would_end_past_its_budget(monkeypatch):
    """Evaluations made slow (0.3 s each) and every named policy a seed: the search, its starts and
    the best plan's rebuild included, ends within its budget (a planted fault: the starts evaluated
    every seed whatever the time)."""

    def slow(*args, **kwargs):
        time.sleep(0.3)
        return simulate_columns(*args, **kwargs)

    monkeypatch.setattr(key_search_module, "simulate_columns", slow)
    inst = online_instance(5, n=40)
    began = time.perf_counter()
    found = key_search(inst, "latency", TimeBudget.of(2.0, start=began), seed_points(sorted(POLICY_CONFIGS)))
    assert time.perf_counter() - began < 2.0 + 0.1  # an evaluation may take a little more than the slowest before
    assert found.evaluations >= 1


def test_never_below_the_exhaustive_optimum():
    checked = 0
    for seed in TINY:
        inst = tiny_instance(seed, arrivals=True)
        if len(inst.requests) < 2 or len({r.arrival for r in inst.requests}) < 2:
            continue
        best = exhaustive_mean(inst, "latency")
        assert best is not None
        found = key_search(inst, "latency", TimeBudget.of(0.3), seed_points(), seed=seed)
        if found.start < float("inf"):
            assert found.value >= best[0] * (1 - 1e-9), (seed, found.value, best[0])
            checked += 1
    assert checked >= 5


def test_kept_share_only_for_latency():
    budget = TimeBudget.of(10.0)
    share = KEY_SEARCH_SHARE if ahead_of_time() else 0.0  # it runs only on the compiled kernels
    assert kept_for_key_search("latency", budget) == pytest.approx(share * 10.0, abs=0.05)
    assert kept_for_key_search("ttft", budget) == 0.0 and kept_for_key_search("latency", NO_LIMIT) == 0.0


def test_solve_for_latency_runs_the_search_and_is_never_worse():
    rng = random.Random(0)
    inst = online_instance(rng.randint(20, 30), n=60, memory=0.3)
    t0 = time.perf_counter()
    res = solve(inst, {"objective": "latency", "time_limit": 8})
    assert time.perf_counter() - t0 < 8 + 2.0
    info = res.extra["scale"]["key_search"]
    if not ahead_of_time():
        assert info == "not run: the compiled engine is not built (optsched warmup)"
        return
    assert isinstance(info, dict) and info["evaluations"] >= 1
    values = res.extra["policy_values"]
    if info["improved"]:
        assert values["key-search"] == pytest.approx(info["value"], rel=1e-12)
        assert res.objective <= values["key-search"] + 1e-12
    assert res.objective <= min(v for k, v in values.items() if k in POLICY_CONFIGS) + 1e-12
    rep = replay(inst, res.schedule)
    assert rep.feasible and res.objective == pytest.approx(objective_of(rep, "latency"), rel=1e-12)


def test_not_run_without_the_compiled_kernels(monkeypatch):
    """Without ``optsched warmup`` the first engine run would wait for numba: the phase says so and
    keeps no time from the policy search."""
    monkeypatch.setattr(key_search_module, "ahead_of_time", lambda: False)
    schedules, info = {}, {}
    inst = online_instance(1)
    key_search_module.key_search_phase(schedules, info, inst, "latency", TimeBudget.of(5), (None, None), [])
    assert schedules == {} and info["key_search"].startswith("not run: the compiled engine is not built")
    assert kept_for_key_search("latency", TimeBudget.of(10.0)) == 0.0
