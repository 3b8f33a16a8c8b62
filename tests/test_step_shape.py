"""The step-shape terms of the cost model (``token_tile``/``per_tile``, ``decode.per_max_kv``) outside
InferMax (tests/test_infermax*.py cover its formulation):

- replay prices them (a schedule computed by hand), the simulator's clock and the Hybrid policies'
  clocks price them (a clock without them is caught: a planted fault);
- the Hybrid MIP, the hybrid-offline load and Aladdin refuse a profile with one, exit 2 naming the
  field; the Hybrid bounds accept it; gmax and scls-batch read ``static_latency`` and are unchanged;
- the profile loader's errors, the vllm-replay plan's ``kv_max`` feature (a plan without it reads 0)
  and the executor's refit, ``optsched fit --token-tile``;
- property (hypothesis): no proven bound exceeds the value of a feasible schedule under random
  profiles with step-shape terms.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from optsched.bounds import generic_bounds, instance_bounds
from optsched.cli import main
from optsched.costfit import check_profile_toml, profile_toml
from optsched.costmodel import MAX_TOKEN_TILE, CostModelError, cost_model_from_mapping
from optsched.executor.compare import compare
from optsched.export.vllm_replay import ReplayPlan, build_plan
from optsched.instance import parse_instance
from optsched.policies.engine import Engine
from optsched.problems.hybrid.online import simulate_policy
from optsched.schedule import Batch, Item, Schedule, replay
from tests.support.export import BATCHES, INSTANCE, execute_result
from tests.support.legal_schedules import random_legal_schedule
from tests.support.paths import INSTANCES
from tests.support.profiles import assert_proven_bounds_below, small_instances, static_instances
from tests.support.report import serial_fcfs
from tests.support.solving import registered_bounds, registered_solve

#: llama2-7b-a100 with both step-shape terms, large enough to change times on tiny instances.
SHAPE = {
    "layers": 32,
    "base": 6.486e-05,
    "per_token": 1.91e-06,
    "token_tile": 4,
    "per_tile": 5e-05,
    "prefill": {"bias": 9.26e-05, "per_token_sq": 1.6773e-10},
    "decode": {"bias": 1.921e-05, "per_kv": 8.513e-09, "per_max_kv": 2e-06},
}
#: The same without the step-shape terms.
NO_SHAPE = {k: v for k, v in SHAPE.items() if k not in ("token_tile", "per_tile")} | {
    "decode": {k: v for k, v in SHAPE["decode"].items() if k != "per_max_kv"}
}


def instance_of(model, reqs, **limits):
    return parse_instance({"name": "shape", "cost_model": model, "limits": limits, "requests": reqs})


def twin_of(inst):
    """``inst`` under its profile's linear twin (a clock that drops the step-shape terms)."""
    data = inst.to_dict()
    return parse_instance({**data, "cost_model": inst.cost_model.linear_twin().to_dict()})


# --------------------------------------------------------------------------- replay by hand


def test_replay_prices_the_shape_terms_by_hand():
    """Prefill of 5 tokens (tile 4: 2 tiles), then b's prefill with a's decode, then both decoding
    (KV 6 and 2: KV_max 6). Layers 1, every coefficient a round number."""
    model = {
        "base": 1.0,
        "per_token": 0.1,
        "token_tile": 4,
        "per_tile": 0.5,
        "prefill": {"bias": 0.2, "per_token": 0.01},
        "decode": {"bias": 0.3, "per_token": 0.02, "per_kv": 0.001, "per_max_kv": 0.01},
    }
    reqs = [{"id": "a", "prompt_tokens": 5, "output_tokens": 3}, {"id": "b", "prompt_tokens": 2, "output_tokens": 2}]
    inst = instance_of(model, reqs, token_budget=8)
    schedule = Schedule(
        "shape",
        (
            Batch((Item("a", 5),)),
            Batch((Item("b", 2), Item("a", 1))),
            Batch((Item("a", 1), Item("b", 1))),
        ),
    )
    t1 = 1.0 + 0.1 * 5 + 0.5 * 2 + (0.2 + 0.01 * 5)  # ceil(5 / 4) = 2 tiles
    t2 = 1.0 + 0.1 * 3 + 0.5 * 1 + (0.2 + 0.01 * 2) + (0.3 + 0.02 * 1 + 0.001 * 5 + 0.01 * 5)  # a reads 5
    t3 = 1.0 + 0.1 * 2 + 0.5 * 1 + (0.3 + 0.02 * 2 + 0.001 * (6 + 2) + 0.01 * 6)  # KV 6 and 2: KV_max 6
    res = replay(inst, schedule)
    assert res.feasible, res.violations
    assert res.features == [(5, 5, 25, 0, 0, 0, 0), (3, 2, 4, 1, 5, 0, 5), (2, 0, 0, 2, 8, 0, 6)]
    assert res.ends == pytest.approx([t1, t1 + t2, t1 + t2 + t3], rel=1e-12)
    assert res.metrics.makespan == pytest.approx(2.75 + 2.395 + 2.108, rel=1e-12)


# --------------------------------------------------------------------------- clocks


def _arrival_instances(model, seed):
    rng = random.Random(seed)
    reqs = [
        {
            "id": f"r{k}",
            "arrival": round(rng.random() * 0.01, 4),
            "prompt_tokens": rng.randint(1, 40),
            "output_tokens": rng.randint(1, 12),
        }
        for k in range(8)
    ]
    return instance_of(model, reqs, token_budget=16, kv_capacity=200, max_running=4)


@pytest.mark.parametrize("policy", ["vllm", "sarathi", "sarathi-ef", "rank-i"])
def test_the_simulator_clock_is_the_replayed_time(policy):
    """The engine's clock after the run is the replayed makespan under shape terms; an engine whose
    clock drops them (run on the linear twin) ends at another time, which this check sees."""
    for seed in range(3):
        inst = _arrival_instances(SHAPE, seed)
        engine = Engine.from_instance(inst, policy)
        engine.advance()
        rep = replay(inst, engine.schedule())
        assert rep.feasible, rep.violations
        assert engine.now == pytest.approx(rep.metrics.makespan, rel=1e-12)
        planted = Engine.from_instance(twin_of(inst), policy)
        planted.advance()
        caught = replay(inst, planted.schedule())
        assert not caught.feasible or planted.now < caught.metrics.makespan * (1 - 1e-9)


@pytest.mark.parametrize("policy", ["hybrid-baseline", "hybrid-baseline-global", "hybrid", "hybrid-online"])
def test_hybrid_policies_clocks_price_the_shape_terms(policy):
    """Request b arrives after a would end under the linear twin but before it ends with the terms:
    a clock without them starts b's batch before a's last one ends (the planted fault, caught by
    the replay); the policy's own clock does not."""
    a = {"id": "a", "prompt_tokens": 9, "output_tokens": 6}
    alone = instance_of(SHAPE, [a], token_budget=4, max_running=2)
    schedule = simulate_policy(alone, policy)
    true_end = replay(alone, schedule).metrics.makespan
    twin_end = replay(twin_of(alone), schedule).metrics.makespan
    assert true_end > twin_end * (1 + 1e-6)
    b = {"id": "b", "arrival": (true_end + twin_end) / 2, "prompt_tokens": 3, "output_tokens": 2}
    inst = instance_of(SHAPE, [a, b], token_budget=4, max_running=2)
    rep = replay(inst, simulate_policy(inst, policy))
    assert rep.feasible, rep.violations
    planted = replay(inst, simulate_policy(twin_of(inst), policy))
    assert not planted.feasible


# --------------------------------------------------------------------------- refusals and acceptance


def _write(tmp_path, data, name="shape.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def _hybrid_data(model):
    reqs = [
        {"id": f"q{k}", "prompt_tokens": p, "output_tokens": o} for k, (p, o) in enumerate([(6, 3), (3, 4), (4, 2)])
    ]
    return {"name": "hyb", "cost_model": model, "limits": {"token_budget": 16, "max_running": 2}, "requests": reqs}


def _aladdin_data(model):
    data = json.loads((INSTANCES / "aladdin-fig3.json").read_text())
    return {**data, "cost_model": model}


ONLY_TILE = {k: v for k, v in SHAPE.items() if k != "decode"} | {"decode": NO_SHAPE["decode"]}
ONLY_MAX_KV = {k: v for k, v in SHAPE.items() if k not in ("token_tile", "per_tile")}


@pytest.mark.parametrize(
    "build, command",
    [
        (_hybrid_data, ["solve", "{path}", "--problem", "hybrid", "--time-limit", "10"]),
        (_hybrid_data, ["solve", "{path}", "--problem", "hybrid-offline", "--time-limit", "10"]),
        (_hybrid_data, ["bound", "{path}", "--problem", "hybrid-offline"]),
        (_aladdin_data, ["solve", "{path}", "--problem", "aladdin", "--time-limit", "5"]),
        (_aladdin_data, ["bound", "{path}", "--problem", "aladdin"]),
    ],
    ids=["hybrid-solve", "hybrid-offline-solve", "hybrid-offline-bound", "aladdin-solve", "aladdin-bound"],
)
@pytest.mark.parametrize(
    "model, field",
    [(ONLY_TILE, "cost_model.per_tile"), (ONLY_MAX_KV, "cost_model.decode.per_max_kv")],
    ids=["tile", "max-kv"],
)
def test_refusals_exit_2_naming_the_field(tmp_path, capsys, build, command, model, field):
    base = build(model)
    if build is _aladdin_data:  # Aladdin's own coefficients, with the one term added
        base["cost_model"] = {**json.loads((INSTANCES / "aladdin-fig3.json").read_text())["cost_model"]}
        if field.endswith("per_tile"):
            base["cost_model"] |= {"token_tile": 128, "per_tile": 1e-4}
        else:
            base["cost_model"]["decode"] = {**base["cost_model"]["decode"], "per_max_kv": 1e-7}
    path = _write(tmp_path, base)
    assert main([path if a == "{path}" else a for a in command]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("optsched: error: ") and path in err, err
    assert f"'{field}'" in err, err


def test_hybrid_bounds_and_policies_accept_the_shape_terms(tmp_path, capsys):
    """``bound --problem hybrid`` reads the linear twin (proven, at most a policy's makespan) and
    ``simulate --policy hybrid`` runs; the MIP alone refuses."""
    inst = parse_instance(_hybrid_data(SHAPE))
    policy = replay(inst, simulate_policy(inst, "hybrid")).metrics.makespan
    bounds = registered_bounds("hybrid", inst, {"time_limit": 5})
    strict = [b for b in bounds if b.name == "strict"]
    assert strict and strict[0].valid and 0 < strict[0].value <= policy
    path = _write(tmp_path, _hybrid_data(SHAPE))
    assert main(["bound", path, "--problem", "hybrid"]) == 0
    assert main(["simulate", path, "--policy", "hybrid"]) == 0
    capsys.readouterr()
    res = registered_solve("hybrid", inst, {"time_limit": 10})
    assert res.status == "unsupported" and "cost_model.per_tile" in res.message


@pytest.mark.parametrize("problem, data", static_instances(), ids=["gmax", "scls-batch"])
def test_static_latency_formulations_ignore_the_shape_terms(problem, data):
    values = []
    for model in (NO_SHAPE, SHAPE):
        res = registered_solve(problem, parse_instance({**data, "cost_model": model}), {"time_limit": 10})
        values.append((res.status, res.objective))
    assert values[0] == values[1] and values[0][1] is not None


def test_the_generic_bounds_keep_the_tile_cost():
    """The work bound reads the linear twin (the tile cost as per_tile / token_tile per token) and
    the critical path prices lone batches exactly: both rise over the profile without the terms."""
    reqs = [{"id": f"q{k}", "prompt_tokens": 30 + 7 * k, "output_tokens": 5 + k} for k in range(6)]
    with_terms = {b.name: b.value for b in instance_bounds(instance_of(SHAPE, reqs, token_budget=64))}
    without = {b.name: b.value for b in instance_bounds(instance_of(NO_SHAPE, reqs, token_budget=64))}
    for name in ("makespan-work", "makespan-critical-path", "mean-ttft"):
        assert with_terms[name] > without[name] * (1 + 1e-6), name


def test_the_work_bound_tile_floor_is_tight_on_one_decoding_request():
    """One request of 1 prompt token and 9 outputs alone: 9 batches of one token each, a whole tile
    each (the linear twin counts 9 / 4 tiles). Without per_max_kv the work bound with its tile floor
    is the serial schedule's makespan exactly."""
    inst = instance_of(ONLY_TILE, [{"id": "a", "prompt_tokens": 1, "output_tokens": 9}], token_budget=64)
    serial = replay(inst, serial_fcfs(inst)).metrics.makespan
    (work,) = [b for b in generic_bounds(inst, "makespan") if b.name == "work"]
    assert work.value == pytest.approx(serial, rel=1e-9)
    twin = [b for b in generic_bounds(twin_of(inst), "makespan") if b.name == "work"][0]
    tiles = inst.cost_model.layers * inst.cost_model.per_tile * (9 - 9 / 4)
    assert work.value == pytest.approx(twin.value + tiles, rel=1e-9)


# --------------------------------------------------------------------------- the profile loader


@pytest.mark.parametrize(
    "change, field",
    [
        ({"token_tile": 128}, "cost_model.per_tile"),
        ({"per_tile": 1e-4}, "cost_model.token_tile"),
        ({"token_tile": 0, "per_tile": 1e-4}, "cost_model.token_tile"),
        ({"token_tile": 1.5, "per_tile": 1e-4}, "cost_model.token_tile"),
        ({"token_tile": True, "per_tile": 1e-4}, "cost_model.token_tile"),
        ({"token_tile": MAX_TOKEN_TILE + 1, "per_tile": 1e-4}, "cost_model.token_tile"),
        ({"token_tile": 128, "per_tile": -1.0}, "cost_model.per_tile"),
        ({"prefill": {"per_max_kv": 1e-7}}, "cost_model.prefill.per_max_kv"),
        ({"decode": {"per_max_kv": "x"}}, "cost_model.decode.per_max_kv"),
    ],
)
def test_the_loader_names_the_bad_field(tmp_path, capsys, change, field):
    with pytest.raises(CostModelError, match=field.replace(".", r"\.")):
        cost_model_from_mapping({"base": 1e-3, **change})
    data = {
        "name": "bad",
        "cost_model": {"base": 1e-3, **change},
        "requests": [{"id": "a", "prompt_tokens": 3, "output_tokens": 2}],
    }
    path = _write(tmp_path, data, "bad.json")
    assert main(["bound", path]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and path in err and field in err, err


def test_a_profile_round_trips_with_its_shape_terms():
    model = cost_model_from_mapping(SHAPE)
    assert model.has_shape_terms and model.shape_term_field() == "cost_model.per_tile"
    assert cost_model_from_mapping(model.to_dict()) == model
    plain = cost_model_from_mapping(NO_SHAPE)
    assert not plain.has_shape_terms and plain.linear_twin() is plain
    assert "token_tile" not in plain.to_dict() and "per_max_kv" not in plain.to_dict()["decode"]


@pytest.mark.parametrize("model", [SHAPE, NO_SHAPE], ids=["shape", "plain"])
def test_a_written_profile_reads_back_with_exactly_its_terms(model):
    """profile_toml writes the optional terms only when set (a missing one reads 0, as in to_dict):
    the TOML reads back as the same profile either way."""
    template = cost_model_from_mapping(model)
    text = profile_toml("p", "test", template.base, template.per_token, template=template)
    assert ("token_tile" in text, "per_max_kv" in text) == (template.per_tile > 0, template.decode.per_max_kv > 0)
    back = check_profile_toml(text)
    assert back.to_dict() == template.to_dict()


# --------------------------------------------------------------------------- export, executor, fit


def test_the_plan_carries_kv_max_and_an_older_plan_reads_zero():
    inst = parse_instance({**INSTANCE, "cost_model": SHAPE})
    plan = build_plan(inst, Schedule("e2e-tiny", BATCHES), block_size=16)
    rep = replay(inst, Schedule("e2e-tiny", BATCHES))
    assert [s.features for s in plan.steps] == [f for f in rep.features if f[0] > 0]
    assert any(s.features[6] > 0 for s in plan.steps)
    for s in plan.steps:
        assert s.predicted_time == pytest.approx(inst.cost_model.batch_time(*s.features), rel=1e-12)
    data = plan.to_dict()
    assert all("kv_max" in s["features"] for s in data["steps"])
    for s in data["steps"]:
        del s["features"]["kv_max"]
    older = ReplayPlan.from_dict(data)
    assert all(s.features[6] == 0 and s.features[:6] == p.features[:6] for s, p in zip(older.steps, plan.steps))
    result = compare(execute_result(plan, [s.predicted_time for s in plan.steps]))
    assert result["mape"] == pytest.approx(0.0, abs=1e-9)
    assert [r["features"][6] for r in result["steps"]] == [s.features[6] for s in plan.steps]
    assert compare(execute_result(older, [s.predicted_time for s in plan.steps]))["compared_steps"] == len(plan.steps)


#: A whole-model profile with a tile of 64 tokens (one of the fit's tile choices).
TILED = {
    "base": 3e-3,
    "per_token": 6e-6,
    "token_tile": 64,
    "per_tile": 1.5e-3,
    "prefill": {"per_token_sq": 1.4e-9, "per_ctx": 1.5e-9},
    "decode": {"bias": 1e-4, "per_token": 1.8e-5, "per_kv": 1.8e-7, "per_max_kv": 5e-7},
}


def _grid_file(tmp_path, model):
    """A step-measurement grid (the format of optsched.measured) of times computed from ``model``:
    prefill-only, decode-only and mixed steps across many tile boundaries."""
    cm = cost_model_from_mapping(model)
    rng = np.random.default_rng(5)
    grid = []
    for j in range(90):
        q, cached, n_dec = int(rng.integers(2, 700)), int(rng.integers(0, 2000)), int(rng.integers(0, 40))
        ctx = [int(c) for c in rng.integers(2, 3000, size=n_dec + 1)]
        if j % 3 == 0:
            q = 0
        elif j % 3 == 1:
            n_dec = 0
        reqs = ([[[q, q + cached, int(cached == 0)], 1]] if q else []) + [
            [[1, c, 1], 1] for c in ctx[: n_dec + (q == 0)]
        ]
        kvs = [c - 1 for c in ctx[: n_dec + (q == 0)]]
        feats = (q + len(kvs), q, q * q, len(kvs), sum(kvs), q * cached, max(kvs, default=0))
        grid.append({"kind": "mixed", "reqs": reqs, "gpu_ms": 1e3 * cm.batch_time(*feats)})
    path = tmp_path / "steps.json"
    path.write_text(json.dumps({"device": "synthetic", "time_unit": "ms", "grid": grid}))
    return str(path)


def test_fit_token_tile_auto_finds_the_tile_and_none_fits_without(tmp_path, capsys):
    path = _grid_file(tmp_path, TILED)
    assert main(["fit", path, "--json"]) == 0
    auto = json.loads(capsys.readouterr().out)
    assert auto["profile"]["token_tile"] == 64
    assert auto["profile"]["per_tile"] == pytest.approx(1.5e-3, rel=1e-4)
    assert auto["profile"]["decode"]["per_max_kv"] == pytest.approx(5e-7, rel=1e-4)
    assert auto["errors"]["all"]["max_pct"] < 1e-4
    assert main(["fit", path, "--token-tile", "none", "--json"]) == 0
    none = json.loads(capsys.readouterr().out)
    assert "token_tile" not in none["profile"] and none["errors"]["all"]["max_pct"] > 1.0
    toml = tmp_path / "fitted.toml"
    assert main(["fit", path, "--token-tile", "64", "--out", str(toml)]) == 0
    capsys.readouterr()
    assert main(["bound", str(INSTANCES / "toy-4.json"), "--cost-model", str(toml)]) == 0


def test_fit_of_a_csv_refuses_token_tile(tmp_path, capsys):
    path = tmp_path / "times.csv"
    path.write_text("tokens,time\n1,0.01\n64,0.02\n128,0.04\n")
    assert main(["fit", str(path), "--token-tile", "64"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--token-tile" in err and str(path) in err


# --------------------------------------------------------------------------- property

#: Random profiles with step-shape terms (and sometimes the context term) over NO_SHAPE.
SHAPE_MODELS = st.builds(
    lambda tile, per_tile, max_kv, ctx: {
        **NO_SHAPE,
        **({"token_tile": tile, "per_tile": per_tile} if per_tile else {}),
        "prefill": {**NO_SHAPE["prefill"], "per_ctx": ctx},
        "decode": {**NO_SHAPE["decode"], "per_max_kv": max_kv},
    },
    st.sampled_from([1, 2, 3, 8]),
    st.sampled_from([0.0, 1e-6, 1e-4]),
    st.sampled_from([0.0, 1e-7, 2e-6, 1e-4]),
    st.sampled_from([0.0, 2e-6]),
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inst=small_instances(SHAPE_MODELS), seed=st.integers(0, 2**31), p_evict=st.sampled_from([0.0, 0.2]))
def test_no_bound_exceeds_a_feasible_schedule_under_shape_terms(inst, seed, p_evict):
    legal = random_legal_schedule(inst, random.Random(seed), p_evict)
    rep = replay(inst, legal.schedule)
    assert rep.feasible, rep.violations
    assert_proven_bounds_below(inst, legal.schedule, rep)
