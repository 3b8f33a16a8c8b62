"""The adaptive prompt share (``prefill_share``, ``prefill_tile``; optsched/policies/share.py).

- The compiled engine is the reference engine batch for batch for random decode-first configurations
  with the share (any share and tile, with KV blocks, the look-ahead, time budgets, eviction-free or
  not) on random instances, and on every shipped instance; every schedule replays cleanly.
- A hand-made instance: the prompt chunks beside the decodes take the rule's budget, batch by batch
  (the knob changes the schedule, and the rule's rounding is half up).
- Planted: a reference engine that ignores the share is caught by the agreement check.
- The grouping ``running_decode`` then ``all`` (decodes first, then every prompt by priority): a later
  short prompt goes before the rest of a started one; the groups' order is checked.
- The rule: whole tiles nearest the share, half up, at least one tile, at most P; bad configurations
  refused with a message naming the option.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from optsched import Instance, Limits, Request, load_cost_model, replay
from optsched.instance import load_instance
from optsched.policies import engine as engine_module
from optsched.policies.config import POLICY_CONFIGS, PREFILL_TILE, PolicyConfig
from optsched.policies.engine import simulate
from optsched.policies.share import batch_prefill_budget
from optsched.schedule import Item
from tests.policies.test_fastengine import SHIPPED, assert_same
from tests.policies.test_policy_properties import check, configs, fitting, instances
from tests.support.paths import INSTANCES

DECODE_FIRST = [
    ("running_decode", "running_prefill", "waiting"),
    ("running_decode", "waiting", "running_prefill"),
    ("running_decode", "all"),
]


@st.composite
def share_configs(draw) -> PolicyConfig:
    """A random decode-first configuration with the adaptive share."""
    config = draw(configs())
    return replace(
        config,
        groups=draw(st.sampled_from(DECODE_FIRST)),
        hybrid=True,
        chunked=True,
        prefill_share=draw(st.sampled_from([0.2, 0.5, 1.0, 2.5, 4.0, 16.0])),
        prefill_tile=draw(st.sampled_from([1, 2, 4, 7, 128])),
        kv_block=draw(st.sampled_from([1, 1, 4])),
        time_budget=draw(st.sampled_from([None, None, 0.004, 2.5])),
    )


@settings(max_examples=300, deadline=None)
@given(instances(), share_configs())
def test_share_configs_compiled_equal_the_reference(instance: Instance, config: PolicyConfig) -> None:
    instance = fitting(instance, config)
    assert_same(instance, config)
    check(instance, config)


@pytest.mark.parametrize("name", SHIPPED)
def test_share_policies_on_every_shipped_instance(name: str) -> None:
    inst = load_instance(INSTANCES / f"{name}.json")
    for base in ("sarathi", "sarathi-pc", "mc-sf", "slo-budget-fcfs", "sarathi-pc-ef"):
        for share in (0.5, 4.0):
            config = replace(POLICY_CONFIGS[base], name="share", prefill_share=share)
            try:
                simulate(inst, config, compiled=False)
            except ValueError:  # an SLO-aware policy on an instance without SLO targets
                continue
            assert_same(inst, config)
            check(inst, config)


def share_instance() -> Instance:
    """One request decoding from the second batch on while three prompts of 40 tokens wait."""
    cost = load_cost_model("llama2-7b-a100")
    reqs = (Request("a", 0.0, 4, 12), *(Request(k, 0.0001, 40, 2) for k in "bcd"))
    return Instance("share", cost, Limits(64, 64, 1000, None), reqs)


@pytest.mark.parametrize("compiled", [False, True])
def test_chunks_beside_the_decodes_take_the_share(compiled: bool) -> None:
    inst = share_instance()
    config = replace(POLICY_CONFIGS["sarathi-pc"], name="share", prefill_share=1.0, prefill_tile=4)
    batches = simulate(inst, config, compiled=compiled).batches
    # W = 3 prompts wait, D = 1 decodes: 3 tiles of 4 tokens, the decode counted (B4)
    assert batches[1].items == (Item("a", 1), Item("b", 11))
    assert batches[2].items == (Item("a", 1), Item("b", 11))
    # without the share the chunk fills P
    plain = simulate(inst, replace(config, prefill_share=None, prefill_tile=None), compiled=compiled).batches
    assert plain[1].items == (Item("a", 1), Item("b", 40), Item("c", 23))
    assert replay(inst, simulate(inst, config, compiled=compiled)).feasible


def test_the_tile_defaults_to_the_cost_models() -> None:
    config = replace(POLICY_CONFIGS["sarathi-pc"], name="share", prefill_share=1.0)
    assert config.share_tile(64) == 64 and config.share_tile(0) == PREFILL_TILE
    assert replace(config, prefill_tile=4).share_tile(64) == 4
    inst = share_instance()
    tiled = replace(inst, cost_model=replace(inst.cost_model, token_tile=4, per_tile=1e-4))
    for compiled in (False, True):
        default = simulate(tiled, config, compiled=compiled).batches
        assert default == simulate(tiled, replace(config, prefill_tile=4), compiled=compiled).batches
        assert default != simulate(tiled, replace(config, prefill_tile=8), compiled=compiled).batches


def test_a_reference_that_ignores_the_share_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    inst = share_instance()
    config = replace(POLICY_CONFIGS["sarathi-pc"], name="share", prefill_share=1.0, prefill_tile=4)
    assert_same(inst, config)
    monkeypatch.setattr(engine_module, "batch_prefill_budget", lambda budget, *args: budget)
    with pytest.raises(AssertionError):
        assert_same(inst, config)


@given(st.integers(1, 5000), st.floats(0.01, 50), st.integers(1, 256), st.integers(0, 300), st.integers(0, 300))
def test_the_budget_is_whole_tiles_nearest_the_share(
    budget: int, share: float, tile: int, waiting: int, decoding: int
) -> None:
    found = batch_prefill_budget(budget, share, tile, waiting, decoding)
    assert 1 <= found <= budget
    if decoding == 0 or found == budget:
        assert decoding > 0 or found == budget
        return
    assert found % tile == 0
    target = share * waiting / decoding
    assert found == tile or abs(found / tile - target) <= 0.5 + 1e-9


def test_the_budget_rounds_half_up() -> None:
    assert batch_prefill_budget(64, 1.25, 4, 2, 1) == 12  # 2.5 tiles: 3 (Python's round gives 2)
    assert batch_prefill_budget(64, 0.5, 4, 5, 2) == 4  # 1.25 tiles: 1
    assert batch_prefill_budget(64, 0.1, 4, 1, 9) == 4  # at least one tile
    assert batch_prefill_budget(64, 8.0, 4, 9, 1) == 64  # at most P
    assert batch_prefill_budget(64, 8.0, 4, 9, 0) == 64  # no decode: P


def test_bad_share_configs_are_refused() -> None:
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="prefill_share must be a positive finite number"):
            replace(POLICY_CONFIGS["sarathi-pc"], prefill_share=bad)
    with pytest.raises(ValueError, match="prefill_tile must be >= 1"):
        replace(POLICY_CONFIGS["sarathi-pc"], prefill_share=2.0, prefill_tile=0)
    with pytest.raises(ValueError, match="prefill_tile sizes prefill_share's tiles"):
        replace(POLICY_CONFIGS["sarathi-pc"], prefill_tile=64)
    for name in ("vllm", "vllm-v1", "sarathi-nocp", "sarathi-nohy", "rank-i", "srpf"):
        with pytest.raises(ValueError, match="prefill_share sizes the prompt chunks beside the decodes"):
            replace(POLICY_CONFIGS[name], prefill_share=2.0)


def test_decodes_then_every_prompt_by_priority() -> None:
    """``running_decode`` then ``all``: the decodes first, then a later arrival of higher priority (a
    shorter prompt under ``order='prompt'``) before the rest of a started prompt."""
    cost = load_cost_model("llama2-7b-a100")
    reqs = (Request("a", 0.0, 4, 12), Request("b", 0.0001, 40, 2), Request("c", 0.01, 6, 2))
    inst = Instance("merged", cost, Limits(64, 64, 1000, None), reqs)
    merged = PolicyConfig("merged", ("running_decode", "all"), order="prompt", chunk=12)
    for compiled in (False, True):
        batches = simulate(inst, merged, compiled=compiled).batches
        assert batches[1].items == (Item("a", 1), Item("b", 11))
        later = [b.items for b in batches if any(it.id == "c" for it in b.items)][0]
        assert later[:2] == (Item("a", 1), Item("c", 6))  # c (6 tokens) before the rest of b
    sarathi = replace(merged, groups=("running_decode", "running_prefill", "waiting"))
    later = [b.items for b in simulate(inst, sarathi).batches if any(it.id == "c" for it in b.items)][0]
    assert later[1].id == "b"
    for groups in (("all", "running_decode"), ("running_prefill", "all")):
        with pytest.raises(ValueError, match="or running_decode then all"):
            PolicyConfig("x", groups)
    with pytest.raises(ValueError, match="needs the running_decode group without all"):
        PolicyConfig("x", ("running_decode", "all"), time_budget=0.1, tpot_lazy=True)
