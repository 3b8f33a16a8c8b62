"""Property tests: any policy configuration on any small instance terminates and replays cleanly.

Covers the named policies and arbitrary :class:`PolicyConfig` combinations (group order, hybrid,
chunking, chunk size, every order, eviction-free, B4 on/off, eviction by waiting requests, front/tail,
the KV look-ahead) under
random limits (C, P <= C, M down to the largest request's I + O - 1, R_max), online arrivals and
random TTFT and TPOT targets (the SLO-aware policies read them).
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from optsched import Instance, Limits, Request, load_cost_model, replay
from optsched.costmodel import CostModel, PhaseCost
from optsched.instance import SLO
from optsched.policies.config import ORDERS, POLICY_CONFIGS, PolicyConfig
from optsched.policies.engine import Engine, simulate

#: The last has the prefill-context term (per_ctx > 0): chunks over cached keys cost more.
COSTS = [
    CostModel(name="unit", base=1.0),
    load_cost_model("llama2-7b-a100"),
    replace(
        load_cost_model("llama2-7b-a100"), prefill=PhaseCost(bias=9.26e-05, per_token_sq=1.6773e-10, per_ctx=3e-10)
    ),
]
#: SLO targets in seconds: below and above the batch times of every cost model here.
TARGETS = st.floats(0.005, 5).map(lambda x: round(x, 4))
GROUPINGS = [
    ("all",),
    ("waiting", "running"),
    ("running", "waiting"),
    ("waiting", "running_decode", "running_prefill"),
    ("running_decode", "running_prefill", "waiting"),
    ("running_prefill", "running_decode", "waiting"),
    ("running_decode", "waiting", "running_prefill"),
    ("running_decode", "all"),
]


@st.composite
def instances(draw) -> Instance:
    n = draw(st.integers(1, 14))
    online = draw(st.booleans())
    reqs = []
    for k in range(n):
        arrival = draw(st.floats(0, 3, allow_nan=False).map(lambda x: round(x, 3))) if online else 0.0
        slo = SLO(ttft=draw(TARGETS), tpot=draw(TARGETS))  # read by the SLO-aware policies (slo-budget)
        reqs.append(Request(f"q{k}", arrival, draw(st.integers(1, 30)), draw(st.integers(1, 12)), slo=slo))
    biggest = max(r.max_kv for r in reqs)
    budget = draw(st.integers(1, 48))
    limits = Limits(
        budget,
        draw(st.integers(1, budget)),
        draw(st.integers(biggest, 3 * biggest)),
        draw(st.one_of(st.none(), st.integers(1, 5))),
    )
    return Instance("prop", draw(st.sampled_from(COSTS)), limits, tuple(reqs))


@st.composite
def configs(draw) -> PolicyConfig:
    groups = draw(st.sampled_from(GROUPINGS))
    return PolicyConfig(
        "custom",
        groups,
        order=draw(st.sampled_from(ORDERS)),
        hybrid=draw(st.booleans()),
        chunked=draw(st.booleans()),
        chunk=draw(st.one_of(st.none(), st.integers(1, 64))),
        eviction_free=draw(st.booleans()),
        prefill_counts_decodes=draw(st.booleans()),
        evict_for_waiting=draw(st.booleans()),
        evicted_to_front=draw(st.booleans()),
        kv_lookahead=draw(st.booleans()),
    )


def fitting(instance: Instance, name: str | PolicyConfig) -> Instance:
    """``instance`` with M raised, for a policy with KV in blocks, to whole blocks holding its largest
    request (a token-granular M may be too small for whole blocks; the engine then refuses it)."""
    block = (POLICY_CONFIGS[name] if isinstance(name, str) else name).kv_block
    need = -(-max(r.max_kv for r in instance.requests) // block) * block
    if instance.limits.kv_capacity >= need:
        return instance
    return replace(instance, limits=replace(instance.limits, kv_capacity=need))


def check(instance: Instance, policy) -> None:
    schedule = simulate(instance, policy)
    result = replay(instance, schedule)
    assert result.feasible, result.violations[:5]
    cfg = POLICY_CONFIGS[policy] if isinstance(policy, str) else policy
    if cfg.eviction_free:
        assert result.metrics.evictions == 0


@settings(max_examples=150, deadline=None)
@given(instances(), st.sampled_from(sorted(POLICY_CONFIGS)))
def test_named_policies_replay(instance, name):
    check(fitting(instance, name), name)


@settings(max_examples=150, deadline=None)
@given(instances(), configs())
def test_any_policy_config_replays(instance, config):
    check(instance, config)


@settings(max_examples=40, deadline=None)
@given(instances(), st.sampled_from(sorted(POLICY_CONFIGS)), st.lists(st.floats(0, 20), max_size=6))
def test_advance_in_steps_equals_one_run(instance, name, stops):
    """Stopping the engine at arbitrary times (advance(t) ... advance()) changes nothing."""
    instance = fitting(instance, name)
    engine = Engine.from_instance(instance, name)
    for t in sorted(stops):
        engine.advance(t)
        assert all(s.m <= s.reserved for s in engine.snapshot().running)
    engine.advance()
    assert engine.done()
    assert engine.schedule().batches == simulate(instance, name).batches


@settings(max_examples=80, deadline=None)
@given(instances(), st.sampled_from(sorted(POLICY_CONFIGS)))
def test_engine_clock_is_the_replayed_time(instance, name):
    """The simulator's own clock (batch times it computes, prefill-context term included) ends
    where the replay of its schedule ends."""
    instance = fitting(instance, name)
    engine = Engine.from_instance(instance, name)
    engine.advance()
    result = replay(instance, engine.schedule())
    assert result.feasible, result.violations[:5]
    assert engine.now == result.ends[-1]
