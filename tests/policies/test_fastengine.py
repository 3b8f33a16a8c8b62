"""The compiled engine (optsched/policies/fastengine.py) against the reference engine.

- Every named policy on every shipped instance: batch for batch the reference engine's schedule,
  produced by the kernel itself (not by the fallback) for every policy the kernel compiles
  (``fastengine.compiles``: every registered policy), and the same replay.
- Random instances x named policies and arbitrary PolicyConfig combinations, KV blocks
  (``kv_block``) and watermarks (``kv_watermark``) included (property tests).
- What the kernel leaves to the reference engine (a request larger than M, an order without a key
  function) still runs, with the reference's result or error.

The full ``splitwise_conv`` trace is compared in ``tests/benchmarks/bench_simcore.py``.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from optsched.instance import Instance, InstanceError, Limits, Request, load_instance
from optsched.policies.config import POLICY_CONFIGS, PolicyConfig
from optsched.policies.engine import simulate
from optsched.policies.fastsim import compiles, simulate_columns
from optsched.schedule import Schedule, replay
from tests.policies.test_policy_properties import configs, fitting, instances
from tests.support.paths import INSTANCES

SHIPPED = sorted(p.stem for p in INSTANCES.glob("*.json"))


def assert_same(instance: Instance, policy: str | PolicyConfig) -> None:
    config = POLICY_CONFIGS[policy] if isinstance(policy, str) else policy
    try:
        reference = simulate(instance, policy, compiled=False)
    except ValueError:
        with pytest.raises(ValueError):
            simulate(instance, policy, compiled=True)
        return
    columns = simulate_columns(instance, config)
    if not compiles(config):  # on the reference engine (fastengine's docstring): the same schedule
        assert columns is None and simulate(instance, policy, compiled=True) == reference
        return
    assert columns is not None, "the kernel left a plain instance to the reference engine"
    fast = Schedule(instance.name, columns=columns)
    assert fast.batches == reference.batches
    assert simulate(instance, policy, compiled=True) == reference


@pytest.mark.parametrize("name", SHIPPED)
def test_every_policy_on_every_shipped_instance(name: str) -> None:
    inst = load_instance(INSTANCES / f"{name}.json")
    for policy in POLICY_CONFIGS:
        assert_same(inst, policy)
    schedule = simulate(inst, "sarathi", compiled=True)
    assert repr(replay(inst, schedule, compiled=True)) == repr(replay(inst, schedule, compiled=False))


@settings(max_examples=200, deadline=None)
@given(instances(), st.sampled_from(sorted(POLICY_CONFIGS)), st.booleans())
def test_named_policies_on_random_instances(instance: Instance, name: str, fit: bool) -> None:
    assert_same(fitting(instance, name) if fit else instance, name)


@settings(max_examples=300, deadline=None)
@given(instances(), configs(), st.sampled_from([1, 2, 4, 16]), st.integers(0, 3), st.booleans())
def test_kv_blocks_and_watermarks_on_random_instances(
    instance: Instance, config: PolicyConfig, block: int, watermark: int, fit: bool
) -> None:
    config = replace(config, kv_block=block, kv_watermark=watermark)
    assert_same(fitting(instance, config) if fit else instance, config)


def test_a_request_that_fits_m_but_not_whole_blocks_is_refused_as_by_the_reference() -> None:
    # I + O - 1 = 20 <= M = 24, but 2 blocks of 16 > floor(24 / 16) = 1 block
    inst = Instance(
        "blocks", load_instance(INSTANCES / "toy-4.json").cost_model, Limits(64, 64, 24), (Request("a", 0, 16, 5),)
    )
    messages = []
    for compiled in (False, True):
        with pytest.raises(InstanceError, match="needs 2 KV blocks of 16 tokens") as error:
            simulate(inst, "vllm-v1", compiled=compiled)
        messages.append(str(error.value))
    assert messages[0] == messages[1]


@settings(max_examples=200, deadline=None)
@given(instances(), configs())
def test_any_policy_config_on_random_instances(instance: Instance, config: PolicyConfig) -> None:
    assert_same(instance, config)


def test_a_request_larger_than_m_is_refused_as_by_the_reference() -> None:
    inst = Instance(
        "big", load_instance(INSTANCES / "toy-4.json").cost_model, Limits(8, 8, 4), (Request("a", 0, 4, 2),)
    )
    with pytest.raises(ValueError, match="can never finish"):
        simulate(inst, "vllm", compiled=True)


def test_every_registered_policy_compiles() -> None:
    assert all(map(compiles, POLICY_CONFIGS.values()))


def test_an_order_without_a_key_function_runs_on_the_reference_engine() -> None:
    inst = load_instance(INSTANCES / "poisson-mixed-100.json")
    config = replace(POLICY_CONFIGS["rank-i"], name="rank-x")
    object.__setattr__(config, "order", "unknown-order")
    assert simulate_columns(inst, config) is None


def test_output_arrays_that_are_too_short_grow() -> None:
    inst = load_instance(INSTANCES / "infermax-i1024-o32-n64.json")
    inst = replace(inst, limits=replace(inst.limits, kv_capacity=2 * max(r.prompt_tokens for r in inst.requests) + 40))
    reference = simulate(inst, "vllm", compiled=False)
    assert replay(inst, reference).metrics.evictions > 0
    columns = simulate_columns(inst, POLICY_CONFIGS["vllm"], items_hint=1)
    assert Schedule(inst.name, columns=columns).batches == reference.batches
