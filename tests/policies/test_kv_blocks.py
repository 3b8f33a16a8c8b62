"""KV in whole blocks (``PolicyConfig.kv_block``) and the ``vllm-v1`` policy.

- blocks change admission and eviction exactly where vLLM's block allocation does (hand-made cases);
- any policy with blocks replays cleanly and never holds more than ``floor(M / b)`` blocks of ``b``
  tokens, counting each request's KV in whole blocks (random instances and configurations);
- ``vllm-v1`` with token-granular KV is ``sarathi-pc`` batch for batch (FCFS with tail eviction keeps
  the running requests a prefix of the arrival order, so "running, waiting" and "running decodes,
  running prefills, waiting" walk the same candidates);
- the watermark (``kv_watermark``, vLLM's) keeps blocks free at admission beside running requests;
- the compiled engine runs blocks and watermarks itself, batch for batch the reference engine's
  (random cases in ``test_fastengine.py``).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from optsched import Instance, Limits, Request, load_instance, replay
from optsched.costmodel import CostModel
from optsched.policies.config import POLICY_CONFIGS, PolicyConfig
from optsched.policies.engine import simulate
from optsched.policies.fastsim import compiles, simulate_columns
from optsched.schedule import Item, Schedule
from tests.policies.test_policy_properties import configs, instances
from tests.support.paths import INSTANCES

UNIT = CostModel(name="unit", base=1.0)


def peak_blocks(instance: Instance, schedule: Schedule, block: int) -> int:
    """The most KV blocks of ``block`` tokens held after any batch (each request's KV rounded up)."""
    prompt = {r.id: r.prompt_tokens for r in instance.requests}
    out = {r.id: r.output_tokens for r in instance.requests}
    m: dict[str, int] = {}
    gen: dict[str, int] = {}
    peak = 0
    for batch in schedule.batches:
        for rid in batch.evict:
            if m[rid] >= prompt[rid]:
                prompt[rid] = m[rid] + 1
            m[rid] = 0
        for it in batch.items:
            held = m.get(it.id, 0)
            m[it.id] = held + it.tokens
            if held >= prompt[it.id] or held + it.tokens == prompt[it.id]:
                gen[it.id] = gen.get(it.id, 0) + 1
        peak = max(peak, sum(-(-k // block) for k in m.values()))
        for rid in [r for r in m if gen.get(r, 0) == out[r]]:
            del m[rid]
    return peak


def test_vllm_v1_is_registered_with_vllms_block_size():
    cfg = POLICY_CONFIGS["vllm-v1"]
    assert (cfg.groups, cfg.hybrid, cfg.chunked, cfg.chunk, cfg.kv_block) == (
        ("running", "waiting"),
        True,
        True,
        None,
        16,
    )
    assert POLICY_CONFIGS["vllm-v1-ef"].kv_block == 16
    with pytest.raises(ValueError, match="kv_block must be >= 1"):
        PolicyConfig("x", ("all",), kv_block=0)


def test_blocks_hold_back_an_admission_that_tokens_allow():
    # M = 40 tokens = 2 whole blocks of 16. 'a' (17 tokens) needs 2 blocks, so 'b' (15) must wait;
    # token-granular KV admits both (17 + 15 <= 40).
    inst = Instance("blocks", UNIT, Limits(64, 64, 40, None), (Request("a", 0.0, 17, 2), Request("b", 0.0, 15, 2)))
    blocks = simulate(inst, "vllm-v1", compiled=False)
    tokens = simulate(inst, replace(POLICY_CONFIGS["vllm-v1"], kv_block=1), compiled=False)
    assert [(it.id, it.tokens) for it in blocks.batches[0].items] == [("a", 17)]
    assert sorted((it.id, it.tokens) for it in tokens.batches[0].items) == [("a", 17), ("b", 15)]
    assert replay(inst, blocks).feasible and peak_blocks(inst, blocks, 16) <= 2


def test_a_decode_needs_a_new_block_only_at_a_block_boundary():
    # Prompts of 5 and 3 tokens under M = 16 = 2 blocks of 8. Batch 0 prefills both (one block
    # each); batches 1-3 decode 'a' to 8 tokens; in batch 4 its decode needs a second block, so the
    # later request 'b' is preempted (vLLM's running[-1]). Token-granular KV holds 16 tokens until
    # batch 5 (5 + 3 + 2 per batch).
    reqs = (Request("a", 0.0, 5, 10), Request("b", 0.0, 3, 10))
    inst = Instance("boundary", UNIT, Limits(64, 64, 16, None), reqs)
    cfg = replace(POLICY_CONFIGS["vllm-v1"], kv_block=8)
    sched = simulate(inst, cfg, compiled=False)
    evicting = [j for j, b in enumerate(sched.batches) if b.evict]
    assert evicting[0] == 4 and sched.batches[4].evict == ("b",)
    tokens = simulate(inst, replace(cfg, kv_block=1), compiled=False)
    assert [j for j, b in enumerate(tokens.batches) if b.evict][0] == 5
    assert replay(inst, sched).feasible and peak_blocks(inst, sched, 8) <= 2


@settings(max_examples=150, deadline=None)
@given(instances(), configs(), st.sampled_from([2, 4, 16]))
def test_any_policy_with_blocks_replays_within_the_blocks(inst, cfg, block):
    cfg = replace(cfg, kv_block=block)
    cap = inst.limits.kv_capacity // block * block
    if any(-(-r.max_kv // block) * block > cap for r in inst.requests):
        with pytest.raises(ValueError, match="can never finish"):
            simulate(inst, cfg)
        return
    schedule = simulate(inst, cfg)
    result = replay(inst, schedule)
    assert result.feasible, result.violations[:5]
    assert peak_blocks(inst, schedule, block) <= cap // block
    if cfg.eviction_free:
        assert not any(b.evict for b in schedule.batches)


@pytest.mark.parametrize("name", sorted(p.stem for p in INSTANCES.glob("*.json")))
def test_vllm_v1_with_token_kv_is_sarathi_pc_on_shipped_instances(name):
    inst = load_instance(INSTANCES / f"{name}.json")
    token_v1 = replace(POLICY_CONFIGS["vllm-v1"], kv_block=1)
    assert simulate(inst, token_v1, compiled=False).batches == simulate(inst, "sarathi-pc").batches


@settings(max_examples=150, deadline=None)
@given(instances())
def test_vllm_v1_with_token_kv_is_sarathi_pc_on_random_instances(inst):
    inst = replace(inst, limits=replace(inst.limits, prefill_budget=inst.limits.token_budget))
    token_v1 = replace(POLICY_CONFIGS["vllm-v1"], kv_block=1)
    assert simulate(inst, token_v1, compiled=False).batches == simulate(inst, "sarathi-pc", compiled=False).batches


def test_the_compiled_engine_runs_blocks_as_the_reference_engine():
    assert compiles(POLICY_CONFIGS["vllm-v1"]) and compiles(POLICY_CONFIGS["vllm-v1-ef"])
    inst = load_instance(INSTANCES / "poisson-mixed-100.json")
    inst = replace(inst, limits=replace(inst.limits, kv_capacity=3000))
    v1 = POLICY_CONFIGS["vllm-v1"]
    for cfg in (v1, POLICY_CONFIGS["vllm-v1-ef"], replace(v1, kv_watermark=4)):
        columns = simulate_columns(inst, cfg)
        assert columns is not None, cfg.name
        fast, reference = Schedule(inst.name, columns=columns), simulate(inst, cfg, compiled=False)
        assert fast.batches == reference.batches
        assert repr(replay(inst, fast)) == repr(replay(inst, reference))
        assert replay(inst, reference).metrics.evictions > 0 or cfg.eviction_free


def test_watermark_holds_back_an_admission_beside_running_requests_only():
    # M = 64 = 4 blocks of 16, watermark 1 block (vLLM applies it only beside running requests).
    # 'a' (16 tokens, 1 block) runs first; 'b' (32 tokens, 2 blocks) beside it needs 2 + 1 of the 3
    # free blocks: admitted; 'c' (16 tokens) then needs 1 + 1 of the 1 left and waits, where without
    # the watermark it is admitted in the same batch. A request alone needs no watermark.
    reqs = (Request("a", 0.0, 16, 3), Request("b", 0.0, 32, 3), Request("c", 0.0, 16, 3))
    inst = Instance("watermark", UNIT, Limits(128, 128, 64, None), reqs)
    cfg = replace(POLICY_CONFIGS["vllm-v1"], kv_watermark=1)
    for compiled in (False, True):
        first = sorted(it.id for it in simulate(inst, cfg, compiled=compiled).batches[0].items)
        plain = sorted(it.id for it in simulate(inst, "vllm-v1", compiled=compiled).batches[0].items)
        assert (first, plain) == (["a", "b"], ["a", "b", "c"])
        alone = Instance("alone", UNIT, Limits(128, 128, 64, None), (Request("a", 0.0, 60, 3),))
        assert simulate(alone, replace(cfg, kv_watermark=3), compiled=compiled).batches[0].items == (Item("a", 60),)
    with pytest.raises(ValueError, match="kv_watermark must be >= 0"):
        PolicyConfig("x", ("all",), kv_watermark=-1)


@settings(max_examples=100, deadline=None)
@given(instances(), configs(), st.sampled_from([1, 4, 16]), st.integers(1, 3))
def test_any_policy_with_a_watermark_replays_within_the_blocks(inst, cfg, block, watermark):
    cfg = replace(cfg, kv_block=block, kv_watermark=watermark)
    cap = inst.limits.kv_capacity // block * block
    if any(-(-r.max_kv // block) * block > cap for r in inst.requests):
        return
    schedule = simulate(inst, cfg)
    assert replay(inst, schedule).feasible
    assert peak_blocks(inst, schedule, block) <= cap // block
