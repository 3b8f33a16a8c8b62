"""The full MIP (1)-(25) of the Hybrid paper against an exhaustive search over its own model space.

Model space enumerated (docstring of optsched.problems.hybrid.model): an ordered partition of the requests
into bins (bin k prefills the requests of block k whole, at most P tokens), each bin followed by decode
rounds in which every running request decodes; at most J requests run (are prefilled and unfinished) at
each prefill stage. Given the order of blocks, starting each bin at the earliest round where the running
count allows it is optimal (earlier starts only finish requests earlier), so the search enumerates the
ordered partitions and schedules each greedily. Its cost is the contract's replayed makespan:
alpha_p * bins + beta_p * sum N^p + alpha_d * rounds + beta_d * sum D.
"""

from __future__ import annotations

import itertools
import math
import random
import time

import pytest

from optsched.costmodel import load_cost_model
from optsched.instance import Instance, Limits, Request
from optsched.problems.hybrid.bounds import strict_bound
from optsched.problems.hybrid.model import stages_to_schedule
from optsched.problems.hybrid.timing import decode_rounds, timing_of
from optsched.schedule import replay
from tests.support.solving import solver

solve = solver("hybrid")

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # PuLP 3.x announces its 4.0 API


def ordered_partitions(items: tuple[int, ...]):
    if not items:
        yield []
        return
    for size in range(1, len(items) + 1):
        for block in itertools.combinations(items, size):
            rest = tuple(i for i in items if i not in block)
            for tail in ordered_partitions(rest):
                yield [list(block)] + tail


def exhaustive(instance: Instance) -> tuple[float, list[tuple[list[int], int]]]:
    """Optimal cost over the model space and the stages (block, decode rounds after it) reaching it."""
    tm = timing_of(instance)
    reqs = instance.requests
    D = [decode_rounds(r.output_tokens) for r in reqs]
    const = tm.beta_p * sum(r.prompt_tokens for r in reqs) + tm.beta_d * sum(D)
    best = (math.inf, [])
    for blocks in ordered_partitions(tuple(range(len(reqs)))):
        if any(sum(reqs[i].prompt_tokens for i in b) > tm.prefill_cap or len(b) > tm.clients for b in blocks):
            continue
        finish: dict[int, int] = {}
        starts = []
        s = 0
        for block in blocks:
            while sum(1 for f in finish.values() if f > s) + len(block) > tm.clients:
                s = min(f for f in finish.values() if f > s)
            starts.append(s)
            for i in block:
                finish[i] = s + D[i]
        rounds = max(finish.values())
        cost = tm.alpha_p * len(blocks) + tm.alpha_d * rounds + const
        if cost < best[0] - 1e-12:
            gaps = [b - a for a, b in zip(starts, starts[1:] + [rounds])]
            best = (cost, list(zip(blocks, gaps)))
    return best


def tiny_instance(seed: int, n: int, clients: int = 2, cap: int = 2048) -> Instance:
    rng = random.Random(seed)
    reqs = tuple(Request(f"r{i}", 0.0, rng.randint(1, 900), rng.randint(1, 7)) for i in range(n))
    return Instance(f"tiny{seed}", load_cost_model("llama-65b-ascend8"), Limits(cap, cap, None, clients), reqs)


@pytest.mark.parametrize("seed", range(4))
def test_exhaustive_cost_is_the_replayed_makespan(seed: int) -> None:
    inst = tiny_instance(seed, 5)
    cost, stages = exhaustive(inst)
    rep = replay(inst, stages_to_schedule(inst, stages, {}))
    assert rep.feasible and rep.metrics.makespan == pytest.approx(cost, rel=1e-9)
    assert strict_bound(inst)[0] <= cost + 1e-9


@pytest.mark.parametrize("seed,n", [(0, 3), (1, 4), (2, 4), (3, 5)])
def test_strengthened_mip_optimum_equals_exhaustive(seed: int, n: int) -> None:
    inst = tiny_instance(seed, n)
    cost, _ = exhaustive(inst)
    res = solve(inst, {"solver": "highs", "time_limit": 120})
    assert res.status == "optimal"
    assert res.objective == pytest.approx(cost, rel=1e-7)
    assert res.extra["mip_objective"] == pytest.approx(cost, rel=1e-6)
    assert res.replay is not None and res.replay.feasible


def exhaustive_with_arrivals(instance: Instance) -> float:
    """Least replayed makespan over the model space with release times (row A3): every ordered
    partition into prefill blocks and every number of eager decode rounds between consecutive
    prefills (with arrivals, decoding while a later block's requests are still on their way can beat
    the earliest start in rounds, so the rounds are enumerated, not chosen greedily). Each candidate
    is built by ``stages_to_schedule`` and judged by the replay (J, P and arrivals included)."""
    tm = timing_of(instance)
    reqs = instance.requests
    longest = max(decode_rounds(r.output_tokens) for r in reqs)
    best = math.inf
    for blocks in ordered_partitions(tuple(range(len(reqs)))):
        if any(sum(reqs[i].prompt_tokens for i in b) > tm.prefill_cap for b in blocks):
            continue
        for gaps in itertools.product(range(longest + 1), repeat=len(blocks) - 1):
            rep = replay(instance, stages_to_schedule(instance, list(zip(blocks, (*gaps, 0))), {}))
            if rep.feasible:
                best = min(best, rep.metrics.makespan)
    return best


@pytest.mark.parametrize("seed", range(6))
def test_mip_with_arrivals_equals_exhaustive_and_waits(seed: int) -> None:
    """Release times (row A3): the optimum equals the exhaustive one, its schedule replays (no item
    before its request's arrival: that replay failure was exit 3), and the bound is at most it."""
    rng = random.Random(100 + seed)
    base = tiny_instance(seed, 3 + seed % 2)
    reqs = tuple(
        Request(r.id, rng.choice([0.0, rng.uniform(0.0, 0.4)]), r.prompt_tokens, min(r.output_tokens, 4))
        for r in base.requests
    )
    inst = Instance(base.name, base.cost_model, base.limits, reqs)
    res = solve(inst, {"solver": "highs", "time_limit": 120})
    assert res.replay is not None and res.replay.feasible
    assert res.extra["mip_status"] == "optimal"
    assert res.objective == pytest.approx(exhaustive_with_arrivals(inst), rel=1e-7)
    assert res.bound <= res.objective * (1 + 1e-9)
    assert res.objective >= max(r.arrival for r in reqs)


def test_backends_agree_and_faithful_mode_is_never_better() -> None:
    inst = tiny_instance(5, 4)
    cost, _ = exhaustive(inst)
    cbc = solve(inst, {"solver": "cbc", "time_limit": 120})
    assert cbc.status == "optimal" and cbc.objective == pytest.approx(cost, rel=1e-7)
    faithful = solve(inst, {"solver": "highs", "method": "faithful", "time_model": "contract", "time_limit": 120})
    assert faithful.extra["mip_status"] == "optimal"
    assert faithful.objective == pytest.approx(cost, rel=1e-7)  # same model space, same optimum
    paper = solve(inst, {"solver": "highs", "method": "faithful", "time_limit": 120})
    # the paper's time model over-estimates: its t^max is >= the replayed makespan of its own schedule
    assert paper.extra["mip_objective"] >= paper.objective - 1e-9 or paper.schedule.meta["tail_rounds"] > 0
    assert paper.objective >= cost - 1e-9


def test_large_faithful_model_is_refused_not_built() -> None:
    inst = tiny_instance(0, 60, clients=20)
    res = solve(inst, {"method": "faithful"})
    assert res.status == "unsupported" and "big-M" in res.message


def test_large_strengthened_model_is_refused_not_built(capsys) -> None:
    from optsched.cli import main

    inst = tiny_instance(0, 60, clients=60)  # 60 * 61 / 2 * 60 = 109,800 triples
    res = solve(inst, {})
    assert res.status == "unsupported" and "109800 (request, client, stage) triples" in res.message
    assert main(["solve", "gsm8k-like", "--problem", "hybrid"]) == 2
    assert "hybrid-offline" in capsys.readouterr().err


def test_time_limit_covers_the_build_and_falls_back_to_a_policy() -> None:
    """50 GSM8K-like requests (63,750 stage triples): a 2 s solve took 41 s (12 s of building, then
    the solver's minimum second, then PuLP) and returned no schedule at all. Now the build stops at
    the limit and the schedule is the fallback policy's, replayed, with the proven bound."""
    from optsched.instance import load_instance
    from optsched.problems.hybrid.solve import FALLBACK_POLICY

    full = load_instance("gsm8k-like")
    inst = full.with_requests(full.requests[:50], name="gsm8k-50")
    t0 = time.perf_counter()
    res = solve(inst, {"time_limit": 0.5})
    assert time.perf_counter() - t0 < 20.0  # generous: a loaded machine
    assert res.extra["mip_status"] == "not built within the time limit"
    assert FALLBACK_POLICY in res.incumbent and res.schedule is not None and res.replay.feasible
    assert res.status in ("optimal", "time_limit") and res.bound <= res.objective * (1 + 1e-9)


def test_solver_not_started_when_handing_the_model_over_would_overrun(monkeypatch) -> None:
    """The solver gets the time left minus the expected hand-over (HANDOVER_PER_BUILD build times:
    30 GSM8K-like requests at 3 s took 7.2 s, 4.7 s of it in a backend given 0.6 s). When nothing is
    left it is not started and the result is the fallback policy's schedule with the proven bound."""
    import optsched.mipsolvers as mipsolvers
    import optsched.problems.hybrid.solve as hybrid_solve

    monkeypatch.setattr(mipsolvers, "HANDOVER_PER_BUILD", 1e9)
    inst = tiny_instance(3, 4)
    res = solve(inst, {"time_limit": 30})
    assert res.extra["mip_status"].startswith("not solved:")
    assert hybrid_solve.FALLBACK_POLICY in res.incumbent and res.replay.feasible
    assert res.bound <= res.objective * (1 + 1e-9)


def test_restricted_model_without_solution_gives_the_policy_schedule() -> None:
    """One stage (``bins=1``) cannot hold four requests: the restricted MIP has no solution, but
    the instance has schedules, so the result is the fallback policy's (it was status
    ``infeasible`` with no schedule)."""
    from optsched.problems.hybrid.solve import FALLBACK_POLICY

    inst = tiny_instance(0, 4)
    res = solve(inst, {"time_limit": 30, "bins": 1})
    assert res.extra["mip_status"] == "infeasible"
    assert res.status in ("feasible", "optimal") and res.replay.feasible
    assert "has no solution" in res.incumbent and FALLBACK_POLICY in res.incumbent
    assert res.bound <= res.objective * (1 + 1e-9)


@pytest.mark.parametrize("seed", [0, 12, 18, 24])
def test_result_is_never_worse_than_the_fallback_policy(seed: int) -> None:
    """Under the paper's time model the MIP optimises another makespan than the replay's; whatever
    it returns, the result is at least as good as the fallback policy's schedule (on seeds 12, 18
    and 24 the MIP's optimum replays 0.025 s above it)."""
    from optsched.problems.hybrid.online import simulate_policy
    from optsched.problems.hybrid.solve import FALLBACK_POLICY

    inst = tiny_instance(seed, 4)
    res = solve(inst, {"time_limit": 30, "time_model": "paper"})
    policy_value = replay(inst, simulate_policy(inst, FALLBACK_POLICY)).metrics.makespan
    assert res.replay.feasible and res.objective <= policy_value * (1 + 1e-12)
