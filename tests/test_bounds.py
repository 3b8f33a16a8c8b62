"""Generic cost-model bounds (optsched.bounds): never above any legal schedule's value.

Checked against the serial FCFS schedule, random legal schedules (random subsets, chunks, waits and
evictions, so re-prefill paths are exercised) and every registered policy, on shipped instances and
on random instances under every shipped profile and adversarial inline cost models.
"""

from __future__ import annotations

import math
import random

import pytest

import optsched.bounds as bounds_module
from optsched.bounds import (
    batch_counts,
    critical_path_times,
    generic_bounds,
    instance_bounds,
    least_bias,
    prefill_alone_time,
    request_bounds,
    request_work,
)
from optsched.costmodel import available_profiles, load_cost_model
from optsched.instance import Instance, InstanceError, Limits, Request, available_instances, load_instance
from optsched.policies import POLICIES, reads_slo, simulator_for
from optsched.schedule import Batch, Item, Schedule, replay
from optsched.workload import WorkloadTransforms, apply_transforms
from tests.support.report import random_schedule, serial_fcfs

REL = 1e-9

#: Inline models where the unusual branches of the bounds matter: a large quadratic prefill term
#: (many chunks are cheapest), decode dearer than re-prefill, a per-token-only model, and step-shape terms.
ADVERSARIAL = [
    {
        "layers": 2,
        "base": 1e-3,
        "per_token": 1e-5,
        "prefill": {"bias": 1e-4, "per_token_sq": 1e-4},
        "decode": {"bias": 1e-3, "per_kv": 1e-6},
    },
    {"base": 1e-4, "prefill": {"per_token": 1e-6}, "decode": {"bias": 5e-2, "per_token": 1e-2, "per_kv": 1e-2}},
    {"per_token": 1e-3},
    {  # step-shape terms: a small tile (many started tiles) and a dear longest decode context
        "layers": 2,
        "base": 1e-4,
        "per_token": 1e-5,
        "token_tile": 3,
        "per_tile": 1e-3,
        "prefill": {"per_token_sq": 1e-5, "per_ctx": 1e-6},
        "decode": {"bias": 1e-4, "per_kv": 1e-6, "per_max_kv": 1e-5},
    },
    # a dear context term: chunking pays for itself (pq >= pc / 2), and it never does (pq < pc / 2)
    {"base": 1e-4, "per_token": 1e-5, "prefill": {"per_token_sq": 2e-4, "per_ctx": 1e-4}, "decode": {"per_kv": 1e-5}},
    {"base": 1e-4, "per_token": 1e-5, "prefill": {"per_token_sq": 1e-6, "per_ctx": 1e-4}, "decode": {"per_kv": 1e-5}},
]


def objective_values(inst: Instance, schedule: Schedule) -> dict[str, float]:
    res = replay(inst, schedule)
    assert res.feasible, res.violations[:3]
    assert res.metrics is not None
    return {
        "makespan": res.metrics.makespan,
        "latency": res.metrics.mean_latency,
        "ttft": res.metrics.mean_ttft,
    }


def assert_bounds_below(inst: Instance, schedule: Schedule) -> None:
    values = objective_values(inst, schedule)
    for objective, value in values.items():
        for b in generic_bounds(inst, objective):
            assert b.valid
            assert b.value <= value * (1 + REL), (inst.name, objective, b, value, schedule.meta)
    assert_first_token_counts_below(inst, schedule)


def assert_first_token_counts_below(inst: Instance, schedule: Schedule) -> None:
    """``batch_counts(first_tokens=True)``: at most the batches with items (and those with prefill
    tokens) up to the one generating the last first token."""
    res = replay(inst, schedule)
    last = max(o.first_token for o in res.outcomes.values())
    upto = [j for j, b in enumerate(schedule.batches) if b.items and res.ends[j] <= last]
    B, B_pre = batch_counts(inst, first_tokens=True)
    assert B <= len(upto) and B_pre <= sum(1 for j in upto if res.prefill_tokens[j] > 0), (inst.name, schedule.meta)


def random_instance(rng: random.Random, cost_model, n: int, arrivals: bool) -> Instance:
    reqs = []
    for i in range(n):
        reqs.append(
            Request(f"q{i}", round(rng.random() * 0.05, 4) if arrivals else 0.0, rng.randint(1, 40), rng.randint(1, 12))
        )
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
    for _ in range(12):
        inst = random_instance(rng, model, rng.randint(1, 6), arrivals)
        assert_bounds_below(inst, serial_fcfs(inst))
        for _ in range(4):
            assert_bounds_below(inst, random_schedule(inst, rng, evict_prob=rng.choice([0.0, 0.1, 0.4])))


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_policies_respect_bounds(policy: str) -> None:
    """Random instances under every profile; a policy of another problem may reject some (InstanceError)."""
    rng = random.Random(3)
    simulate = simulator_for(policy)  # shipped instances: tests/report/test_report.py::test_chain_on_shipped_instances
    applied = 0
    for model in available_profiles():
        for _ in range(3):
            inst = random_instance(rng, model, 8, arrivals=True)
            if reads_slo(policy):  # slo-budget schedules by the requests' TTFT and TPOT targets
                slos = WorkloadTransforms(slo_ttft=rng.choice([0.05, 0.5, 5.0]), slo_tpot=rng.choice([0.01, 0.1]))
                inst = apply_transforms(inst, slos)
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
        inst = Instance("one", load_cost_model(model), Limits(4096, 4096, None, None), (Request("a", 0.25, 300, 20),))
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


def _compositions(total: int, cap: int):
    """Every ordered split of ``total`` into positive parts <= ``cap``."""
    if total == 0:
        yield ()
        return
    for first in range(1, min(cap, total) + 1):
        for rest in _compositions(total - first, cap):
            yield (first, *rest)


@pytest.mark.parametrize("model_index", range(len(cost_models())))
def test_prefill_alone_equals_exhaustive_chunkings(model_index: int) -> None:
    """F(X) is the least cost of every chunking of X tokens into lone prefill batches (chunks <= P,
    each over the KV of the chunks before it), and at most it with a tile term (it counts
    max(k, ceil(X / t)) tiles for k chunks, exact when X <= t: each chunk one tile) or with
    pq < pc / 2 (the sum of squares taken at its bound)."""
    cm = load_cost_model(cost_models()[model_index])
    for P in (1, 3, 5, 16):
        inst = Instance("f", cm, Limits(16, P, None, None), (Request("a", 0.0, 1, 1),))
        for X in range(1, 11):
            brute = min(
                math.fsum(cm.prefill_time(c, sum(split[:j])) for j, c in enumerate(split))
                for split in _compositions(X, P)
            )
            if (cm.token_tile and X > cm.token_tile) or cm.prefill.per_token_sq < cm.prefill.per_ctx / 2:
                assert prefill_alone_time(inst, X) <= brute * (1 + 1e-12), (P, X)
            else:
                assert prefill_alone_time(inst, X) == pytest.approx(brute, rel=1e-12), (P, X)


@pytest.mark.parametrize("name", ["toy-4", "infermax-i1024-o32-n64", "infermax-lilo-silo-64"])
def test_no_policy_beats_the_instance_and_request_bounds(name: str) -> None:
    """``instance_bounds`` and ``request_bounds`` hold for every policy's replayed schedule."""
    inst = load_instance(name)
    bounds = {b.name: b.value for b in instance_bounds(inst)}
    per = {r.id: request_bounds(inst, r) for r in inst.requests}
    checked = 0
    for policy in POLICIES:
        try:
            schedule = simulator_for(policy)(inst)
        except InstanceError:  # a policy with preconditions this instance does not meet
            continue
        res = replay(inst, schedule)
        m = res.metrics
        assert m.makespan >= bounds["makespan"] * (1 - REL), policy
        assert m.mean_latency >= bounds["mean-latency"] * (1 - REL), policy
        assert m.mean_ttft >= bounds["mean-ttft"] * (1 - REL), policy
        assert m.throughput <= bounds["throughput-upper"] * (1 + REL), policy
        for rid, o in res.outcomes.items():
            assert o.latency >= per[rid].e2e * (1 - REL) and o.ttft >= per[rid].ttft * (1 - REL)
            if per[rid].tpot is not None:
                assert o.tpot >= per[rid].tpot * (1 - REL)
        checked += 1
    assert checked > 0


def _least_bias_by_enumeration(inst: Instance) -> float:
    """beta(S) of optsched.bounds by plain enumeration of D and x (the module docstring's program)."""
    cm, P = inst.cost_model, inst.limits.prefill_budget
    L, b, a, pb, pa, pq, db, da, dk = (
        cm.layers,
        cm.base,
        cm.per_token,
        cm.prefill.bias,
        cm.prefill.per_token,
        cm.prefill.per_token_sq,
        cm.decode.bias,
        cm.decode.per_token,
        cm.decode.per_kv,
    )
    B, B_pre = batch_counts(inst)
    reqs = inst.requests
    rho = [
        sorted(
            L * max(0.0, (a + pa + pq) * (r.prompt_tokens + g) - (a + da + dk * (r.prompt_tokens + g - 1)))
            for g in range(1, r.output_tokens)
        )
        for r in reqs
    ]
    first = [math.ceil(r.prompt_tokens / P) for r in reqs]
    best = math.inf
    for D in range(max(B, max(r.output_tokens for r in reqs)) + 1):
        refills = [max(0, r.output_tokens - 1 - D) for r in reqs]
        extra = sum(sum(rho_i[:n]) for rho_i, n in zip(rho, refills))
        x_lo = max(B_pre, max(f + n for f, n in zip(first, refills)), B - D)
        for x in range(max(x_lo, 1), x_lo + 3 * max(r.prompt_tokens for r in reqs) + 3):
            chunks = sum(L * pq * (r.prompt_tokens**2 / x - r.prompt_tokens) for r in reqs if r.prompt_tokens > x)
            best = min(best, L * (b * max(B, D, x) + pb * x + db * D) + extra + chunks)
    return best


#: Cost models where the count program's branches matter: dear decodes (refills pay), a large
#: quadratic prefill term (chunking pays), prefill bias below decode bias.
COUNT_PROGRAM_COSTS = [
    {"base": 1e-4, "prefill": {"per_token": 1e-6}, "decode": {"bias": 5e-2, "per_token": 1e-2, "per_kv": 1e-2}},
    {
        "layers": 2,
        "base": 1e-3,
        "per_token": 1e-5,
        "prefill": {"bias": 1e-4, "per_token_sq": 1e-4},
        "decode": {"bias": 1e-3, "per_kv": 1e-6},
    },
    {
        "base": 2e-3,
        "prefill": {"bias": 1e-3, "per_token": 1e-5, "per_token_sq": 1e-6},
        "decode": {"bias": 5e-4, "per_token": 1e-5, "per_kv": 1e-4},
    },
]


@pytest.mark.parametrize("block", [None, 5])
@pytest.mark.parametrize("seed", range(24))
def test_least_bias_equals_enumeration_of_its_program(
    seed: int, block: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Also with the per-token sums cut into blocks of 5 tokens (long requests over several)."""
    if block is not None:
        monkeypatch.setattr(bounds_module, "TOKEN_BLOCK", block)
    rng = random.Random(seed)
    cost = load_cost_model(COUNT_PROGRAM_COSTS[seed % len(COUNT_PROGRAM_COSTS)])
    n = rng.randint(1, 5)
    reqs = tuple(Request(f"r{i}", 0.0, rng.randint(1, 12), rng.randint(1, 9)) for i in range(n))
    C = rng.randint(12, 24)
    limits = Limits(C, rng.randint(1, C), rng.choice([None, rng.randint(24, 60)]), rng.choice([None, 2]))
    inst = Instance(f"bias-{seed}", cost, limits, reqs)
    assert least_bias(inst) == pytest.approx(_least_bias_by_enumeration(inst), rel=1e-9, abs=1e-15)
    assert least_bias(inst) >= 0.0


@pytest.mark.parametrize(
    "model",
    ["llama2-7b-a100", *ADVERSARIAL],
    ids=["a100", "quadratic", "dear-decode", "per-token", "step-shape", "dear-context", "context-no-chunks"],
)
def test_per_token_sums_do_not_depend_on_their_blocks(model: str | dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """Outputs are summed token by token in blocks of TOKEN_BLOCK tokens (bounded memory); blocks of
    1, 3 and 7 tokens (requests split over blocks, blocks over requests) give the same bounds."""
    rng = random.Random(7)
    reqs = tuple(Request(f"r{i}", 0.0, rng.randint(1, 40), rng.randint(1, 30)) for i in range(9))
    inst = Instance("blocks", load_cost_model(model), Limits(32, 16, 200, None), reqs)

    def values() -> list[float]:
        return [
            *request_work(inst),
            *critical_path_times(inst),
            least_bias(inst),
            *(b.value for b in generic_bounds(inst)),
        ]

    whole = values()
    for block in (1, 3, 7):
        monkeypatch.setattr(bounds_module, "TOKEN_BLOCK", block)
        assert values() == pytest.approx(whole, rel=1e-12)


def test_bounds_of_an_instance_with_a_request_over_memory_are_computed() -> None:
    """``optsched info`` and CSV traces load instances unchecked; a request whose KV can never fit
    (I = 30 > M = 10) makes every bound vacuous, but computing them must not fail."""
    cost = load_cost_model("llama2-7b-a100")
    inst = Instance("over-M", cost, Limits(64, 64, 10, None), (Request("a", 0.0, 30, 4), Request("b", 0.0, 3, 4)))
    fits = Instance("fits", cost, Limits(64, 64, 10, None), (Request("b", 0.0, 3, 4),))
    assert batch_counts(inst)[0] >= batch_counts(fits)[0]
    assert {b.name for b in generic_bounds(inst)} == {"work", "critical-path"}
