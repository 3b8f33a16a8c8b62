"""Comparing schedules batch by batch (optsched.executor.fidelity) and the limits vLLM's own scheduler
runs with (optsched.executor.native); the run itself needs vLLM and is skipped without it (CI's vLLM
end-to-end step runs it: tests/e2e/vllm_e2e.py, case ``vllm-scheduler``)."""

from __future__ import annotations

import importlib.util
from dataclasses import replace

import numpy as np
import pytest

from optsched import Instance, Limits, Request
from optsched.costmodel import CostModel
from optsched.executor.fidelity import agreement, batch_key, comparison_rows, figures
from optsched.executor.native import NativeRunError, engine_limits
from optsched.policies.config import POLICY_CONFIGS
from optsched.policies.engine import simulate
from optsched.schedule import Batch, Item, Schedule

UNIT = CostModel(name="unit", base=1.0)


def small() -> Instance:
    reqs = (Request("a", 0.0, 20, 6), Request("b", 0.0, 12, 9), Request("c", 2.0, 30, 4), Request("d", 3.0, 8, 12))
    return Instance("small", UNIT, Limits(24, 24, 48, 3), reqs)


def test_batch_key_ignores_item_order():
    one = Batch((Item("a", 1), Item("b", 5)), ("c",))
    two = Batch((Item("b", 5), Item("a", 1)), ("c",))
    assert batch_key(one) == batch_key(two)
    assert batch_key(one) != batch_key(Batch((Item("a", 1), Item("b", 4)), ("c",)))
    assert batch_key(one) != batch_key(Batch((Item("a", 1), Item("b", 5))))


def test_agreement_of_a_schedule_with_itself_and_with_a_shifted_copy():
    inst = small()
    sched = simulate(inst, "sarathi-pc")
    same = agreement(sched, sched)
    n = len(sched.batches)
    assert (same.identical_prefix, same.positional, same.matched, same.first_difference) == (n, 1.0, 1.0, None)
    shifted = Schedule(inst.name, (Batch((), (), 0.0), *sched.batches))  # an empty batch first
    agree = agreement(sched, shifted)
    assert agree.identical_prefix == 0 and agree.matched == 1.0 and agree.positional < 1.0
    assert agree.first_difference == (0, sched.batches[0], shifted.batches[0])


def test_figures_replay_and_refuse_an_infeasible_schedule():
    inst = small()
    fig = figures(inst, simulate(inst, "vllm"))
    assert fig.batches > 0 and fig.mean_latency > 0 and fig.mean_ttft <= fig.mean_latency
    bad = Schedule(inst.name, (Batch((Item("a", 99),)),), {"source": "hand-made"})
    with pytest.raises(ValueError, match="hand-made on 'small' does not replay"):
        figures(inst, bad)


def test_comparison_rows_compare_every_policy_with_the_reference():
    inst = small()
    ref = simulate(inst, "vllm-v1")
    ref = Schedule(inst.name, ref.batches, {"source": "vllm-scheduler", "vllm": "0.32.0"})
    rows = comparison_rows(inst, {16: ref}, ["vllm-v1", "vllm"])
    assert [r["schedule"] for r in rows] == ["vLLM 0.32.0", "vllm-v1", "vllm"]
    assert rows[1]["identical_prefix"] == rows[1]["batches"] == rows[0]["batches"] and rows[1]["matched"] == 1.0
    assert rows[2]["positional"] < 1.0


def test_engine_limits_in_vllms_terms_and_refusals():
    inst = small()
    assert engine_limits(inst) == {
        "max_num_batched_tokens": 24,
        "max_num_seqs": 3,
        "max_model_len": 34,
        "block_size": 16,
        "kv_blocks": 3,
    }
    with pytest.raises(NativeRunError, match="vLLM has no P"):
        engine_limits(replace(inst, limits=Limits(24, 12, 48, 3)))
    with pytest.raises(NativeRunError, match="no KV capacity"):
        engine_limits(replace(inst, limits=Limits(24, 24, None, 3)))
    with pytest.raises(NativeRunError, match="max_num_seqs <= max_num_batched_tokens"):
        engine_limits(replace(inst, limits=Limits(24, 24, 48, None)))
    with pytest.raises(NativeRunError, match="a request holding 33 KV tokens needs more than the 2 KV blocks"):
        engine_limits(replace(inst, limits=Limits(24, 24, 47, 3)))


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed (CI's vLLM step runs this)")
def test_vllms_own_scheduler_is_vllm_v1_batch_for_batch():
    from optsched.executor.native import run_vllm_scheduler

    rng = np.random.default_rng(3)
    cost = CostModel(name="inline", base=0.01, per_token=2e-5)
    arrivals = np.cumsum(rng.exponential(0.05, 60))
    reqs = tuple(
        Request(f"r{k}", float(round(t, 6)), int(rng.integers(8, 300)), int(rng.integers(1, 120)))
        for k, t in enumerate(arrivals)
    )
    inst = Instance("vllm-native", cost, Limits(512, 512, 2048, 64), reqs)
    run = run_vllm_scheduler(inst)
    policy = simulate(inst, "vllm-v1")
    assert figures(inst, run.schedule).evictions > 0  # the comparison covers preemptions
    assert run.schedule.batches == policy.batches
    assert agreement(run.schedule, policy).positional == 1.0
    # with vLLM's watermark: 5 % of its 2048 / 16 + 1 blocks (one null block) is 6 blocks
    held_back = run_vllm_scheduler(inst, watermark=0.05)
    marked = simulate(inst, replace(POLICY_CONFIGS["vllm-v1"], kv_watermark=6))
    assert held_back.schedule.batches == marked.batches != policy.batches
