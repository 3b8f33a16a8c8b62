"""Generic cost-model bounds (optsched.bounds): never above any legal schedule's value.

Checked against the serial FCFS schedule, random legal schedules (random subsets, chunks, waits and
evictions, so re-prefill paths are exercised) and every registered policy, on shipped instances and
on random instances under every shipped profile and adversarial inline cost models.
"""

from __future__ import annotations

import math
import random

import pytest
from report_support import random_schedule, serial_fcfs

from optsched.bounds import critical_path_times, generic_bounds, prefill_alone_time
from optsched.costmodel import available_profiles, load_cost_model
from optsched.instance import Instance, InstanceError, Limits, Request, available_instances, load_instance
from optsched.policies import POLICIES, simulator_for
from optsched.schedule import Batch, Item, Schedule, replay

REL = 1e-9

#: Inline models where the unusual branches of the bounds matter: a large quadratic prefill term
#: (many chunks are cheapest), decode dearer than re-prefill, and a per-token-only model.
ADVERSARIAL = [
    {"layers": 2, "base": 1e-3, "per_token": 1e-5, "prefill": {"bias": 1e-4, "per_token_sq": 1e-4},
     "decode": {"bias": 1e-3, "per_kv": 1e-6}},
    {"base": 1e-4, "prefill": {"per_token": 1e-6}, "decode": {"bias": 5e-2, "per_token": 1e-2, "per_kv": 1e-2}},
    {"per_token": 1e-3},
]


def objective_values(inst: Instance, schedule: Schedule) -> dict[str, float]:
    res = replay(inst, schedule)
    assert res.feasible, res.violations[:3]
    assert res.metrics is not None
    return {
        "makespan": res.metrics.makespan,
        "completion": math.fsum(o.finish for o in res.outcomes.values()),
        "ttft": res.metrics.mean_ttft,
    }


def assert_bounds_below(inst: Instance, schedule: Schedule) -> None:
    values = objective_values(inst, schedule)
    for objective, value in values.items():
        for b in generic_bounds(inst, objective):
            assert b.valid
            assert b.value <= value * (1 + REL), (inst.name, objective, b, value, schedule.meta)


def random_instance(rng: random.Random, cost_model, n: int, arrivals: bool) -> Instance:
    reqs = []
    for i in range(n):
        reqs.append(Request(f"q{i}", round(rng.random() * 0.05, 4) if arrivals else 0.0,
                            rng.randint(1, 40), rng.randint(1, 12)))
    cap = max(r.max_kv for r in reqs) + rng.choice([0, 10, 200])
    C = rng.choice([8, 16, 64, 4096])
    limits = Limits(C, rng.choice([C, max(1, C // 2)]), rng.choice([cap, None]), rng.choice([None, 1, 2, 5]))
    return Instance(f"rand-{n}", load_cost_model(cost_model), limits, tuple(reqs))


def cost_models() -> list:
    return [*available_profiles(), *ADVERSARIAL]


def small_shipped() -> list[str]:
    """Shipped instances small enough for serial and random schedules in test time."""
    return [n for n in available_instances() if sum(r.output_tokens for r in load_instance(n).requests) <= 4000]


@pytest.mark.parametrize("name", small_shipped())
def test_shipped_instances(name: str) -> None:
    inst = load_instance(name)
    assert_bounds_below(inst, serial_fcfs(inst))
    rng = random.Random(7)
    for _ in range(5):
        assert_bounds_below(inst, random_schedule(inst, rng, evict_prob=0.2))


@pytest.mark.parametrize("model_index", range(len(cost_models())))
@pytest.mark.parametrize("arrivals", [False, True])
def test_random_instances_and_schedules(model_index: int, arrivals: bool) -> None:
    rng = random.Random(1000 * model_index + arrivals)
    model = cost_models()[model_index]
    for trial in range(12):
        inst = random_instance(rng, model, rng.randint(1, 6), arrivals)
        assert_bounds_below(inst, serial_fcfs(inst))
        for _ in range(4):
            assert_bounds_below(inst, random_schedule(inst, rng, evict_prob=rng.choice([0.0, 0.1, 0.4])))


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_policies_respect_bounds(policy: str) -> None:
    """Random instances under every profile; a policy of another problem may reject some (InstanceError)."""
    rng = random.Random(3)
    simulate = simulator_for(policy)  # shipped instances: tests/test_report.py::test_chain_on_shipped_instances
    applied = 0
    for model in available_profiles():
        for _ in range(3):
            inst = random_instance(rng, model, 8, arrivals=True)
            try:
                schedule = simulate(inst)
            except InstanceError:
                continue
            assert_bounds_below(inst, schedule)
            applied += 1
    assert applied > 0, f"{policy} rejected every random instance"


def test_single_request_critical_path_is_tight() -> None:
    """Alone, one request's critical path is exactly the best serial schedule (no chunking gain)."""
    for model in available_profiles():
        inst = Instance("one", load_cost_model(model), Limits(4096, 4096, None, None),
                        (Request("a", 0.25, 300, 20),))
        serial = objective_values(inst, serial_fcfs(inst))
        (cp,) = [b for b in generic_bounds(inst, "makespan") if b.name == "critical-path"]
        assert cp.value == pytest.approx(serial["makespan"], rel=1e-12)
        (ttft,) = generic_bounds(inst, "ttft")
        assert ttft.value == pytest.approx(serial["ttft"], rel=1e-12)


def test_prefill_alone_prefers_chunks_when_quadratic_dominates() -> None:
    """With a big quadratic term, two chunks beat one, and F finds the better split."""
    model = load_cost_model({"prefill": {"bias": 1.0, "per_token_sq": 1.0}})
    inst = Instance("q", model, Limits(), (Request("a", 0.0, 4, 1),))
    # one chunk: 1 + 16 = 17; two chunks of 2: 2 + 8 = 10; four of 1: 4 + 4 = 8
    assert prefill_alone_time(inst, 4) == pytest.approx(8.0)
    two = Schedule("q", tuple(Batch((Item("a", 1),)) for _ in range(4)))
    assert objective_values(inst, two)["makespan"] == pytest.approx(8.0)
    assert critical_path_times(inst)[0] == pytest.approx(8.0)


def test_work_bound_counts_batches() -> None:
    """Decode-only cost 1 per batch: the makespan is at least the number of batches forced by R_max."""
    model = load_cost_model({"base": 1.0})
    reqs = tuple(Request(f"r{i}", 0.0, 1, 5) for i in range(6))
    inst = Instance("b", model, Limits(4096, 4096, None, 2), reqs)
    # 30 tokens generated, at most 2 a batch -> at least 15 batches of cost 1
    (work,) = [b for b in generic_bounds(inst, "makespan") if b.name == "work"]
    assert work.value == pytest.approx(15.0)
    assert objective_values(inst, serial_fcfs(inst))["makespan"] == pytest.approx(30.0)


def test_unknown_objective() -> None:
    with pytest.raises(ValueError, match="unknown objective"):
        generic_bounds(load_instance("toy-4"), "throughput")


def test_work_bound_trades_batches_for_chunks() -> None:
    """Quadratic prefill: the work bound finds the best prefill-batch count, and a schedule attains it.

    Two prompts of 4, one output token, T = 1 per prefill batch + sum c^2: four batches of two
    1-token chunks cost 4 * (1 + 2) = 12, the least possible (one batch: 1 + 32; two: 2 * (1 + 8)).
    """
    model = load_cost_model({"prefill": {"bias": 1.0, "per_token_sq": 1.0}})
    inst = Instance("q2", model, Limits(), (Request("a", 0.0, 4, 1), Request("b", 0.0, 4, 1)))
    (work,) = [b for b in generic_bounds(inst, "makespan") if b.name == "work"]
    assert work.value == pytest.approx(12.0)
    four = Schedule("q2", tuple(Batch((Item("a", 1), Item("b", 1))) for _ in range(4)))
    assert objective_values(inst, four)["makespan"] == pytest.approx(12.0)


@pytest.mark.parametrize("model_index", range(len(cost_models())))
def test_dominates_the_trivial_bounds(model_index: int) -> None:
    """optsched.bounds is at least optsched.lowerbounds' makespan and TTFT bounds (written apart)."""
    from optsched.lowerbounds import instance_bounds

    rng = random.Random(77 + model_index)
    instances = [load_instance(n) for n in small_shipped()]
    instances += [random_instance(rng, cost_models()[model_index], rng.randint(1, 8), True) for _ in range(10)]
    for inst in instances:
        trivial = {b.name: b.value for b in instance_bounds(inst)}
        ours = {b.name: b.value for b in generic_bounds(inst, "makespan")}
        assert ours["work"] >= trivial["makespan-work"] * (1 - 1e-9)
        assert ours["critical-path"] >= trivial["makespan-critical-path"] * (1 - 1e-9)
        (ttft,) = generic_bounds(inst, "ttft")
        assert ttft.value >= trivial["mean-ttft"] * (1 - 1e-9)
