"""Tail metrics and goodput (:mod:`optsched.metrics`), computed by replay from per-request values."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from optsched import load_instance
from optsched.instance import SLO, Instance, Request, parse_instance
from optsched.metrics import (
    PERCENTILES,
    TAIL_KEYS,
    TAIL_QUANTITIES,
    RequestOutcome,
    compute_metrics,
    outcomes_from_columns,
    tail_summary,
)
from optsched.policies import simulator_for
from optsched.schedule import Batch, Item, Schedule, replay
from optsched.workload import WorkloadTransforms, apply_transforms

DYADIC = {
    "layers": 1,
    "base": 1.0,
    "per_token": 0.5,
    "prefill": {"bias": 2.0, "per_token": 0.0, "per_token_sq": 0.25},
    "decode": {"bias": 1.0, "per_token": 0.5, "per_kv": 0.125},
}


def _worked_example(slo: dict | None = None) -> tuple[Instance, Schedule]:
    """docs/schedule.md's worked example (first tokens 17 and 17, finishes 22 and 31)."""
    reqs = [
        {"id": "r0", "prompt_tokens": 6, "output_tokens": 2, **({"slo": slo} if slo else {})},
        {"id": "r1", "arrival": 5.0, "prompt_tokens": 2, "output_tokens": 3},
    ]
    inst = parse_instance({
        "name": "hand",
        "cost_model": DYADIC,
        "limits": {"token_budget": 4, "kv_capacity": 10},
        "requests": reqs,
    })
    B = lambda *items, evict=(), start=None: Batch(tuple(Item(i, c) for i, c in items), tuple(evict), start)  # noqa: E731
    sched = Schedule(
        "hand",
        (B(("r0", 4), start=1.0), B(("r0", 2), ("r1", 2)), B(("r0", 1), ("r1", 1)), B(evict=("r1",)), B(("r1", 4))),
    )
    return inst, sched


def test_worked_example_tails_and_queue():
    inst, sched = _worked_example()
    res = replay(inst, sched)
    o0, o1 = res.outcomes["r0"], res.outcomes["r1"]
    # r0 is first served by batch 0 (start 1, arrival 0); r1 by batch 1 (start 10, arrival 5).
    assert (o0.first_scheduled, o0.queue) == (1.0, 1.0)
    assert (o1.first_scheduled, o1.queue) == (10.0, 5.0)
    m = res.metrics
    # Two values a <= b: the p-th percentile (linear) is a + p/100 (b - a).
    assert m.ttft_p50 == pytest.approx(14.5, rel=1e-15) and m.ttft_max == 17.0
    assert m.ttft_p90 == pytest.approx(12 + 0.9 * 5, rel=1e-15)
    assert m.tpot_p99 == pytest.approx(5 + 0.99 * 2, rel=1e-15) and m.tpot_max == 7.0
    assert m.latency_p95 == pytest.approx(22 + 0.95 * 4, rel=1e-15) and m.latency_max == 26.0
    assert m.queue_p50 == pytest.approx(3.0, rel=1e-15) and m.queue_max == 5.0
    assert m.goodput == 2 / 31  # no SLO: every finished request counts


def test_goodput_counts_requests_meeting_their_slos():
    inst, sched = _worked_example(slo={"ttft": 10.0})  # r0's TTFT is 17: missed
    m = replay(inst, sched).metrics
    assert m.goodput == 1 / 31 and m.slo_attainment == 0.5
    # --slo-ttft fills only requests without a TTFT target: r1 (TTFT 12) gets 12.5 and meets it.
    filled = apply_transforms(inst, WorkloadTransforms(slo_ttft=12.5))
    assert filled.requests[0].slo == SLO(ttft=10.0) and filled.requests[1].slo == SLO(ttft=12.5)
    assert replay(filled, sched).metrics.goodput == 1 / 31
    tight = apply_transforms(inst, WorkloadTransforms(slo_tpot=6.0))  # r0 TPOT 5 meets, r1 TPOT 7 misses
    m = replay(tight, sched).metrics
    assert m.goodput == 0.0  # r0 still misses its TTFT target


def test_every_tail_key_in_the_metrics_dict():
    inst = load_instance("toy-4")
    d = replay(inst, simulator_for("vllm")(inst)).metrics.to_dict()
    assert len(TAIL_KEYS) == 20
    for key in (*TAIL_KEYS, "goodput"):
        assert key in d


def test_tails_equal_numpy_over_defined_values():
    inst = load_instance("poisson-mixed-100")
    inst = inst.with_requests([
        r if k % 7 else Request(r.id, r.arrival, r.prompt_tokens, 1) for k, r in enumerate(inst.requests)
    ])  # some O = 1: TPOT undefined
    res = replay(inst, simulator_for("sarathi")(inst))
    m = res.metrics.to_dict()
    for q in TAIL_QUANTITIES:
        values = np.array([getattr(o, q) for o in res.outcomes.values() if getattr(o, q) is not None], dtype=float)
        assert len(values) == (sum(r.output_tokens > 1 for r in inst.requests) if q == "tpot" else 100)
        for p in PERCENTILES:
            assert m[f"{q}_p{p}"] == np.percentile(values, p)
        assert m[f"{q}_max"] == values.max()


def test_tail_summary_of_nothing_is_none():
    assert tail_summary("tpot", [None, None]) == dict.fromkeys([
        "tpot_p50",
        "tpot_p90",
        "tpot_p95",
        "tpot_p99",
        "tpot_max",
    ])


def _metrics_by_properties(outs: list[RequestOutcome], makespan: float, evictions: int, batches: int) -> dict:
    """The metrics computed from each outcome's properties, one request at a time."""
    latencies, ttfts = [o.latency for o in outs], [o.ttft for o in outs]
    tpots = [o.tpot for o in outs if o.tpot is not None]
    met = sum(o.meets_slo for o in outs)
    total = math.fsum(latencies)
    tails = {}
    for q in TAIL_QUANTITIES:
        tails.update(tail_summary(q, [getattr(o, q) for o in outs]))
    return {
        "makespan": makespan,
        "mean_latency": total / len(outs),
        "mean_ttft": math.fsum(ttfts) / len(outs),
        "mean_tpot": math.fsum(tpots) / len(tpots) if tpots else None,
        "throughput": sum(o.request.output_tokens for o in outs) / makespan,
        "evictions": evictions,
        "slo_attainment": met / len(outs),
        "G": met / total,
        "batches": batches,
        "total_latency": total,
        "goodput": met / makespan,
        **tails,
    }


@pytest.mark.parametrize("seed", range(5))
def test_metrics_of_columns_equal_the_outcome_properties_bit_for_bit(seed: int) -> None:
    rng = random.Random(seed)
    outs = []
    for k in range(rng.randint(1, 60)):
        slo = rng.choice([None, SLO(ttft=rng.uniform(0, 3)), SLO(tpot=rng.uniform(0, 0.5), e2e=rng.uniform(1, 9))])
        req = Request(f"r{k}", rng.uniform(0, 10), rng.randint(1, 50), rng.choice([1, 2, rng.randint(1, 300)]), slo=slo)
        first = req.arrival + rng.uniform(0.01, 3)
        done = first + rng.uniform(0, 9) * (req.output_tokens > 1)
        outs.append(RequestOutcome(req, first, done, rng.randint(0, 3), req.arrival + rng.uniform(0, 1)))
    makespan = max(o.finish for o in outs) + 0.5
    assert compute_metrics(outs, makespan, 7, 11).to_dict() == _metrics_by_properties(outs, makespan, 7, 11)
    built = outcomes_from_columns(
        [o.request for o in outs], [o.first_token for o in outs], [o.finish for o in outs],
        [o.evictions for o in outs], [o.first_scheduled for o in outs],
    )  # fmt: skip
    assert list(built.values()) == outs and all(type(o) is RequestOutcome for o in built.values())
    assert list(built) == [o.request.id for o in outs]
