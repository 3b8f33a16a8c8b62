"""The compiled replay (optsched/replaykernel.py) against the readable reference rules.

- Every policy on every shipped instance: the compiled replay's result equals the reference's, field
  for field and bit for bit (``repr`` of every float).
- Random legal schedules (property test) replay identically on both paths.
- Planted faults (property test): the kernel alone finds a violation exactly when the reference
  lists one, and :func:`replay` with ``compiled=True`` gives the reference's messages.
- A schedule's columns give back its batches.
"""

from __future__ import annotations

import dataclasses
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from optsched.fastreplay import replay_columns
from optsched.instance import Instance, load_instance
from optsched.policies.config import POLICY_CONFIGS
from optsched.policies.engine import simulate
from optsched.schedcols import columns_of_batches
from optsched.schedule import Batch, Item, Schedule, replay
from optsched.tiering import COMPILED_FROM, use_compiled
from tests.support.legal_schedules import random_legal_schedule
from tests.support.paths import INSTANCES
from tests.test_replay import PROP, instances

SHIPPED = sorted(p.stem for p in INSTANCES.glob("*.json"))


def assert_same(inst: Instance, schedule: Schedule | list[Batch]) -> None:
    """Both paths give the same result, and the kernel's verdict alone is the reference's."""
    ref = replay(inst, schedule, compiled=False)
    fast = replay(inst, schedule, compiled=True)
    assert repr(fast) == repr(ref)
    sched = schedule if isinstance(schedule, Schedule) else Schedule(inst.name, schedule)
    assert (replay_columns(inst, sched.columns()) is not None) == ref.feasible


@pytest.mark.parametrize("name", SHIPPED)
def test_every_policy_on_every_shipped_instance(name: str) -> None:
    inst = load_instance(INSTANCES / f"{name}.json")
    for policy in POLICY_CONFIGS:
        try:
            schedule = simulate(inst, policy)
        except ValueError:  # a request that can never fit this instance's M
            continue
        ref = replay(inst, schedule, compiled=False)
        assert ref.feasible, (policy, ref.violations[:3])
        fast = replay(inst, schedule, compiled=True)
        assert repr(fast) == repr(ref), policy
        assert fast.metrics == ref.metrics


@PROP
@given(inst=instances(), seed=st.integers(0, 2**32 - 1), p_evict=st.sampled_from([0.0, 0.1, 0.4]))
def test_random_legal_schedules_replay_identically(inst: Instance, seed: int, p_evict: float) -> None:
    legal = random_legal_schedule(inst, random.Random(seed), p_evict)
    assert replay_columns(inst, legal.schedule.columns()) is not None
    assert_same(inst, legal.schedule)


def _faults(inst: Instance, batches: list[Batch], rng: random.Random) -> list[list[Batch]]:
    """Schedules with one planted change each (most break a rule; some stay legal)."""
    ids = [r.id for r in inst.requests]
    j = rng.randrange(len(batches))
    b = batches[j]
    out = [batches[:-1], batches[1:], batches + [Batch((Item(ids[0], 1),))]]
    if b.items:
        k = rng.randrange(len(b.items))
        it = b.items[k]

        def with_items(items: tuple[Item, ...]) -> list[Batch]:
            return batches[:j] + [dataclasses.replace(b, items=items)] + batches[j + 1 :]

        out += [
            with_items(b.items[:k] + b.items[k + 1 :]),
            with_items(b.items + (it,)),
            with_items(b.items + (Item("nobody", 1),)),
            with_items(b.items[:k] + (Item(it.id, it.tokens + 1),) + b.items[k + 1 :]),
            with_items(b.items[:k] + (Item(it.id, it.tokens - 1),) + b.items[k + 1 :]),
            batches[:j] + [dataclasses.replace(b, evict=b.evict + (it.id,))] + batches[j + 1 :],
        ]
    victim = rng.choice(ids)
    out += [
        batches[:j] + [dataclasses.replace(b, evict=b.evict + (victim,))] + batches[j + 1 :],
        batches[:j] + [dataclasses.replace(b, start=-1.0)] + batches[j + 1 :],
        batches[:j] + [dataclasses.replace(b, start=(b.start or 0.0) + 0.5)] + batches[j + 1 :],
    ]
    if len(batches) > 1:
        i = rng.randrange(len(batches) - 1)
        out.append(batches[:i] + [batches[i + 1], batches[i]] + batches[i + 2 :])
    return out


@PROP
@given(inst=instances(), seed=st.integers(0, 2**32 - 1))
def test_planted_faults_give_the_same_verdict(inst: Instance, seed: int) -> None:
    rng = random.Random(seed)
    batches = list(random_legal_schedule(inst, rng, 0.2).schedule.batches)
    for schedule in _faults(inst, batches, rng):
        assert_same(inst, schedule)
    lim = inst.limits
    for field in ("token_budget", "prefill_budget", "kv_capacity", "max_running"):
        value = getattr(lim, field)
        tighter = dataclasses.replace(inst, limits=dataclasses.replace(lim, **{field: max(1, (value or 8) - 1)}))
        assert_same(tighter, batches)


def test_a_fault_in_a_large_schedule_is_named_as_by_the_reference() -> None:
    inst = load_instance(INSTANCES / "splitwise-conv-100.json")
    batches = list(simulate(inst, "sarathi").batches)
    b = batches[40]
    batches[40] = dataclasses.replace(b, items=b.items + (Item(b.items[0].id, 1),))
    res = replay(inst, batches, compiled=True)
    assert not res.feasible
    assert f"batch 40: request {b.items[0].id!r}: more than one item in the batch" in res.violations


def test_token_counts_beyond_64_bits_are_judged_by_the_reference() -> None:
    inst = load_instance(INSTANCES / "toy-4.json")
    rid = inst.requests[0].id
    res = replay(inst, [Batch((Item(rid, 2**70),))], compiled=True)
    assert f"batch 0: request {rid!r}: prefill chunk {2**70}" in res.violations[0]


def test_columns_give_back_the_batches() -> None:
    inst = load_instance(INSTANCES / "poisson-mixed-100.json")
    schedule = simulate(inst, "rank-i")
    columns = columns_of_batches(schedule.batches)
    assert Schedule(inst.name, columns=columns).batches == schedule.batches
    assert columns.n_batches == len(schedule.batches)


def test_tiering_runs_the_kernels_once_a_process_did_enough_work() -> None:
    assert use_compiled("unit-test", 10, True) and not use_compiled("unit-test", 10**6, False)
    assert not use_compiled("unit-test", COMPILED_FROM - 1, None)
    assert use_compiled("unit-test", 1, None) and use_compiled("unit-test", 1, None)
    assert use_compiled("unit-test-large", COMPILED_FROM, None)
