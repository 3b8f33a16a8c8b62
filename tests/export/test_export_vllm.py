"""vllm-replay export: plan contents, refusals, round trip and the CLI (no vLLM needed)."""

from __future__ import annotations

import json
import math
import re

import pytest

from optsched.cli import main
from optsched.export.vllm_replay import FORMAT, VERSION, PlanError, ReplayPlan, build_plan, load_plan
from optsched.instance import parse_instance
from optsched.schedule import Schedule, replay
from tests.support.export import BATCHES, INSTANCE, batch_of


@pytest.fixture()
def instance():
    return parse_instance(INSTANCE)


@pytest.fixture()
def schedule():
    return Schedule("e2e-tiny", BATCHES)


def test_plan_mirrors_the_replayed_schedule(instance, schedule):
    res = replay(instance, schedule)
    assert res.feasible
    plan = build_plan(instance, schedule, block_size=16)
    assert len(plan.steps) == len(BATCHES)
    for step, batch, start, end, feats in zip(plan.steps, BATCHES, res.starts, res.ends, res.features):
        assert step.tokens == {it.id: it.tokens for it in batch.items}
        assert step.preempt == batch.evict
        assert step.predicted_time == pytest.approx(end - start)
        assert step.features == feats
    assert plan.predicted_total == pytest.approx(res.metrics.makespan)
    # step 4: 'b' recomputes 30 + 3 tokens (prefill); 'a' (m = 42) and 'c' (m = 20) decode
    assert plan.steps[4].features == (35, 33, 33 * 33, 2, 42 + 20, 0, 42)  # the refill starts from m = 0; KV_max 42
    assert plan.steps[3].preempt == ("b",)
    assert [r.arrival_step for r in plan.requests] == [0, 0, 0]


def test_engine_limits_and_block_rule(instance, schedule):
    plan = build_plan(instance, schedule, block_size=16)
    eng = plan.engine
    assert eng["max_num_batched_tokens"] == 64
    assert eng["max_num_seqs"] == 3
    assert eng["max_model_len"] == 44
    assert eng["kv_blocks"] == 128 // 16
    assert eng["num_gpu_blocks"] == eng["kv_blocks"] + 1  # vLLM's null block
    # step 4 holds a: 43, c: 21, b: 33 slots -> 3 + 2 + 3 blocks of 16
    assert plan.steps[4].kv_blocks == 8
    for step in plan.steps:
        assert step.kv_blocks <= eng["kv_blocks"]


def test_refuses_block_granularity_overflow(instance, schedule):
    small = parse_instance(INSTANCE | {"limits": INSTANCE["limits"] | {"kv_capacity": 112}})
    assert replay(small, schedule).feasible  # token-granular: 97 <= 112
    with pytest.raises(PlanError, match=r"step 4 \(batch 4\).*8 blocks.*7 blocks of 16.*'a': 43 slots"):
        build_plan(small, schedule, block_size=16)
    plan = build_plan(small, schedule, block_size=8)  # 6 + 3 + 5 = 14 blocks of 8 = 112 slots
    assert plan.engine["kv_blocks"] == 14
    assert build_plan(small, schedule, block_size=16, kv_blocks=8).engine["kv_blocks"] == 8


def test_unlimited_kv_gets_the_peak_need(instance, schedule):
    free = parse_instance(INSTANCE | {"limits": {"token_budget": 64}})
    plan = build_plan(free, schedule, block_size=16)
    assert plan.engine["kv_blocks"] == max(s.kv_blocks for s in plan.steps) == 8
    assert plan.engine["kv_capacity_tokens"] is None


def test_refuses_infeasible_schedule_naming_batch_and_request(instance):
    bad = Schedule("e2e-tiny", BATCHES[:3] + (batch_of(("a", 1), ("b", 2)),) + BATCHES[4:])
    with pytest.raises(PlanError, match=r"batch 3: request 'b'"):
        build_plan(instance, bad)


def test_empty_batches_dropped_and_arrival_steps(instance):
    inst = parse_instance(
        INSTANCE
        | {
            "requests": [
                {"id": "a", "arrival": 0.0, "prompt_tokens": 8, "output_tokens": 2},
                {"id": "b", "arrival": 5.0, "prompt_tokens": 4, "output_tokens": 2},
            ]
        }
    )
    sched = Schedule(
        "x",
        (
            batch_of(("a", 8)),
            batch_of(("a", 1)),
            batch_of(),
            batch_of(("b", 4), start=5.0),
            batch_of(("b", 1)),
        ),
    )
    plan = build_plan(inst, sched, block_size=16)
    assert [s.batch for s in plan.steps] == [0, 1, 3, 4]
    assert {r.id: r.arrival_step for r in plan.requests} == {"a": 0, "b": 2}


def test_round_trip_and_malformed_plans(instance, schedule, tmp_path):
    plan = build_plan(instance, schedule, block_size=16)
    path = tmp_path / "plan.json"
    plan.save(path)
    data = json.loads(path.read_text())
    assert data["format"] == FORMAT and data["version"] == VERSION
    again = load_plan(path)
    assert again.to_dict() == plan.to_dict()
    with pytest.raises(PlanError, match="field 'version'"):
        ReplayPlan.from_dict(data | {"version": 99}, "p.json")
    with pytest.raises(PlanError, match="field 'format'"):
        ReplayPlan.from_dict(data | {"format": "x"}, "p.json")
    broken = json.loads(json.dumps(data))
    broken["steps"][2]["tokens"]["zz"] = 1
    with pytest.raises(PlanError, match=r"step 2: unknown request\(s\) \['zz'\]"):
        ReplayPlan.from_dict(broken, "p.json")
    del broken["engine"]
    with pytest.raises(PlanError, match="^p.json: field 'engine': missing$"):
        ReplayPlan.from_dict(broken, "p.json")


@pytest.mark.parametrize("key", ["cost_model", "source"])
@pytest.mark.parametrize("value", [None, True, "x", 1e308])
def test_a_plan_whose_object_field_is_not_an_object(instance, schedule, key, value):
    """Read outside the checks, these were a TypeError (exit 3) in ``optsched execute``."""
    data = build_plan(instance, schedule).to_dict() | {key: value}
    with pytest.raises(PlanError, match=f"^p.json: field '{key}': must be an object, got "):
        ReplayPlan.from_dict(data, "p.json")


@pytest.mark.parametrize("value", [True, 1.5, 4.0, "4", None])
@pytest.mark.parametrize(
    ("where", "edit"),
    [
        ("request 1: field 'prompt_tokens'", lambda d, v: d["requests"][1].update(prompt_tokens=v)),
        ("step 2: field 'tokens': 'a'", lambda d, v: d["steps"][2]["tokens"].update(a=v)),
        ("step 0: field 'batch'", lambda d, v: d["steps"][0].update(batch=v)),
        ("field 'engine': 'block_size'", lambda d, v: d["engine"].update(block_size=v)),
    ],
)
def test_a_plan_integer_field_is_a_json_integer(instance, schedule, where, edit, value):
    """A boolean, a fraction, a whole float or a string where the plan has a token count or an index
    is refused naming the field (``int()`` turned True into 1 and 1.5 into 1)."""
    data = json.loads(json.dumps(build_plan(instance, schedule).to_dict()))
    edit(data, value)
    with pytest.raises(PlanError, match=f"^p.json: {re.escape(where)}: must be an integer, got "):
        ReplayPlan.from_dict(data, "p.json")


def test_cli_export(instance, schedule, tmp_path, capsys):
    inst = tmp_path / "inst.json"
    inst.write_text(json.dumps(INSTANCE))
    sched = tmp_path / "s.json"
    schedule.save(sched)
    out = tmp_path / "plan.json"
    code = main(["export", str(sched), "--instance", str(inst), "--format", "vllm-replay", "--out", str(out), "--json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["exported"] and summary["steps"] == len(BATCHES)
    assert math.isclose(summary["predicted_total"], load_plan(out).predicted_total)
    # refusal: exit 1, reason names the step/batch; nothing written
    out2 = tmp_path / "plan2.json"
    code = main([
        "export",
        str(sched),
        "--instance",
        str(inst),
        "--format",
        "vllm-replay",
        "--out",
        str(out2),
        "--kv-blocks",
        "7",
    ])
    assert code == 1 and not out2.exists()
    assert "step 4 (batch 4)" in capsys.readouterr().err
    # infeasible schedule: exit 1 naming batch and request
    bad = Schedule("e2e-tiny", BATCHES[:-1])
    bad.save(sched)
    assert main(["export", str(sched), "--instance", str(inst), "--format", "vllm-replay", "--out", str(out2)]) == 1
    assert "request 'b': unfinished" in capsys.readouterr().err
    # bad input: unknown instance name in the schedule and no --instance
    assert main(["export", str(sched), "--format", "vllm-replay", "--out", str(out2)]) == 2
    assert main(["export", str(sched), "--format", "nope", "--out", str(out2)]) == 2


@pytest.mark.parametrize("policy", ["vllm", "sarathi", "rank-o"])
@pytest.mark.parametrize("name", ["toy-4", "infermax-lilo-silo-64"])
def test_simulated_schedules_export_faithfully(policy, name):
    """Every policy's schedule on shipped instances becomes a plan that mirrors it step for step."""
    from optsched.instance import load_instance
    from optsched.policies import policy_names, simulator_for

    if policy not in policy_names():
        pytest.skip(f"policy {policy!r} is not registered")
    inst = load_instance(name)
    sched = simulator_for(policy)(inst)
    res = replay(inst, sched)
    assert res.feasible
    m = inst.limits.kv_capacity
    plan = build_plan(inst, sched, block_size=16, kv_blocks=-(-m // 16) + len(inst.requests))
    work = [j for j, b in enumerate(sched.batches) if b.items or b.evict]
    assert [s.batch for s in plan.steps] == work
    assert sum(len(s.preempt) for s in plan.steps) == res.metrics.evictions
    for r in inst.requests:
        planned = sum(s.tokens.get(r.id, 0) for s in plan.steps)
        assert planned == sum(it.tokens for b in sched.batches for it in b.items if it.id == r.id)
        step = plan.steps[plan.requests[inst.index(r.id)].arrival_step]
        assert res.starts[step.batch] >= r.arrival - 1e-9
    assert plan.predicted_total == pytest.approx(sum(e - s for s, e in zip(res.starts, res.ends)))
    assert max(s.kv_blocks for s in plan.steps) <= plan.engine["kv_blocks"]
    assert plan.engine["max_num_seqs"] >= max(len(s.tokens) for s in plan.steps)
