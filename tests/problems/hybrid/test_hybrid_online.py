"""Online methods of the Hybrid paper (Algorithm 1, the marginal-cost rule, the baseline) and the paper's
experiment on a seeded GSM8K-like instance."""

from __future__ import annotations

import random

import pytest

from optsched.costmodel import load_cost_model
from optsched.generators import gsm8k_like
from optsched.instance import Instance, Limits, Request
from optsched.policies import POLICIES, simulator_for
from optsched.problems.hybrid.bounds import paper_bound, strict_bound
from optsched.problems.hybrid.online import client_metrics, simulate_pd
from optsched.schedule import replay
from tests.support.hybrid_paper import paper_limits

HYBRID_POLICIES = sorted(name for name in POLICIES if name.startswith("hybrid"))
PAPER_METHODS = ["hybrid-baseline", "hybrid-offline", "hybrid-online", "hybrid"]


def tiny(reqs: list[tuple[int, int]], clients: int, arrivals: list[float] | None = None, **limits: int) -> Instance:
    requests = tuple(Request(f"r{i}", (arrivals or [0.0] * len(reqs))[i], p, o) for i, (p, o) in enumerate(reqs))
    lim = Limits(
        token_budget=limits.get("cap", 2048),
        prefill_budget=limits.get("cap", 2048),
        kv_capacity=limits.get("kv"),
        max_running=clients,
    )
    return Instance("tiny", load_cost_model("llama-65b-ascend8"), lim, requests)


@pytest.fixture(scope="module")
def gsm8k():
    inst = gsm8k_like(0, limits=paper_limits())
    runs = {}
    for name in PAPER_METHODS:
        schedule = simulator_for(name)(inst)
        rep = replay(inst, schedule)
        runs[name] = (schedule, rep)
    return inst, runs


def test_every_policy_replays_cleanly(gsm8k) -> None:
    inst, runs = gsm8k
    for name, (schedule, rep) in runs.items():
        assert rep.feasible, (name, rep.violations[:3])
        assert max(rep.running) <= 200
        m = client_metrics(inst, schedule, rep)
        assert 0 < m["utilisation"] <= 1 + 1e-9 and 0 < m["u_decode"] <= 1 + 1e-9


def test_ordering_and_hybrid_gain_on_gsm8k(gsm8k) -> None:
    inst, runs = gsm8k
    span = {name: rep.metrics.makespan for name, (_, rep) in runs.items()}
    lb = strict_bound(inst)[0]
    assert lb <= span["hybrid"] <= span["hybrid-baseline"]
    assert span["hybrid"] <= 0.98 * span["hybrid-baseline"]  # hybrid beats the baseline by >= 2 %
    assert all(lb <= v for v in span.values())
    util = {name: client_metrics(inst, s, r)["utilisation"] for name, (s, r) in runs.items()}
    assert util["hybrid"] > util["hybrid-baseline"]
    assert 12.0 < paper_bound(inst)[1] < 13.5


@pytest.mark.parametrize("seed,requests,clients", [(1, 1319, 200), (2, 400, 60), (3, 400, 60), (4, 400, 60)])
def test_ordering_on_more_seeds(seed: int, requests: int, clients: int) -> None:
    inst = gsm8k_like(seed, n=requests, limits=paper_limits(clients))
    spans = {}
    for name in ("hybrid-baseline", "hybrid"):
        rep = replay(inst, simulator_for(name)(inst))
        assert rep.feasible
        spans[name] = rep.metrics.makespan
    assert strict_bound(inst)[0] <= spans["hybrid"] <= spans["hybrid-baseline"]


def test_algorithm1_steals_longest_request_of_busiest_client() -> None:
    # client 0 queue: r0 (short); client 1 queue: r1, r2, r3 (long first after sorting).
    inst = tiny([(4, 2), (4, 9), (4, 3), (4, 7)], clients=2)
    schedule = simulate_pd(inst, [0, 1, 1, 1], sort_queues=True, steal=True, rule="prefill-first")
    rep = replay(inst, schedule)
    assert rep.feasible
    # first stage: r0 on client 0 and client 1's longest, r1; when r0 finishes client 0 steals r3 (7 > 3)
    first = [it.id for it in schedule.batches[0].items]
    assert first == ["r0", "r1"]
    prefills = [it.id for b in schedule.batches for it in b.items if it.tokens > 1]
    assert prefills == ["r0", "r1", "r3", "r2"]


def test_without_stealing_clients_keep_their_queue() -> None:
    inst = tiny([(4, 2), (4, 9), (4, 3), (4, 7)], clients=2)
    schedule = simulate_pd(inst, [0, 1, 1, 1], sort_queues=False, steal=False, rule="prefill-first")
    rep = replay(inst, schedule)
    assert rep.feasible
    # client 0 idles after r0: the makespan covers r1, r2, r3 in sequence on client 1 (8 + 2 + 6 rounds)
    assert sum(1 for x in rep.decode_items if x > 0) == 8 + 2 + 6


def test_marginal_rule_waits_while_prefill_is_dearer() -> None:
    # one long request decodes; short ones on a second client finish and wait for a prefill stage.
    inst = tiny([(100, 40), (10, 2), (10, 2), (10, 2)], clients=2)
    first_first = replay(inst, simulate_pd(inst, [0, 1, 1, 1], sort_queues=False, steal=False, rule="prefill-first"))
    marginal = replay(inst, simulate_pd(inst, [0, 1, 1, 1], sort_queues=False, steal=False, rule="marginal"))
    assert first_first.feasible and marginal.feasible
    # stages: {r0, r1}, {r2}, {r3} under both rules
    assert sum(1 for x in first_first.prefill_tokens if x > 0) == 3
    assert sum(1 for x in marginal.prefill_tokens if x > 0) == 3
    # prefill-first runs r2's prefill right after r1 finishes (round 1) ...
    assert first_first.outcomes["r2"].first_token < first_first.outcomes["r0"].finish
    # ... the marginal rule keeps decoding: C_p = 25 ms + 10 x 0.13 ms stays above C_d (0.42 ms, then
    # + 0.21 ms per round with r0 alone) for the 38 rounds r0 still needs, so r2 waits for r0's end
    assert marginal.outcomes["r2"].first_token > marginal.outcomes["r0"].finish


def test_general_instances_replay_cleanly() -> None:
    rng = random.Random(1)
    for case in range(20):
        n = rng.randint(1, 25)
        reqs = [(rng.randint(1, 300), rng.randint(1, 40)) for _ in range(n)]
        arrivals = [round(rng.uniform(0, 2), 3) for _ in range(n)]
        kv = max(p + o - 1 for p, o in reqs) + rng.randint(0, 400)
        inst = tiny(reqs, clients=rng.randint(1, 5), arrivals=arrivals, cap=rng.choice([64, 256, 2048]), kv=kv)
        for name in HYBRID_POLICIES:
            rep = replay(inst, simulator_for(name)(inst))
            assert rep.feasible, (case, name, rep.violations[:3])
