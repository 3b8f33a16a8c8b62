"""Reading a replay plan checks every field before anything runs: ``optsched execute`` exits 2 with
one line naming the plan, the request or step (its index) and the field, before it looks for vLLM;
so does an out-of-range ``--kv-cache-bytes``. Plans that ``optsched export`` writes still read."""

from __future__ import annotations

import json
from typing import Any

import pytest

from optsched.cli import main
from optsched.export.vllm_replay import PlanError, ReplayPlan, build_plan, load_plan
from optsched.instance import parse_instance
from optsched.schedule import Schedule
from tests.support.export import BATCHES, INSTANCE


def _plan() -> dict[str, Any]:
    return json.loads(json.dumps(build_plan(parse_instance(INSTANCE), Schedule("e2e-tiny", BATCHES)).to_dict()))


def _set(path: tuple[Any, ...], value: Any):
    def edit(data: dict[str, Any]) -> None:
        target = data
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return edit


def _drop(path: tuple[Any, ...]):
    def edit(data: dict[str, Any]) -> None:
        target = data
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]

    return edit


#: Per case: the edit of an exported plan and the message (after ``p.json: ``) it must give.
BAD = {
    "a boolean version": (_set(("version",), True), "field 'version': this optsched reads version 1, got true"),
    "an arrival step past every step": (
        _set(("requests", 1, "arrival_step"), 10**9),
        "request 1: field 'arrival_step': must be from 0 to 6 (an index into the plan's 7 steps), got 1,000,000,000",
    ),
    "a negative arrival": (_set(("requests", 0, "arrival"), -1), "request 0: field 'arrival': must be from 0 to 1e+09"),
    "a string arrival": (_set(("requests", 0, "arrival"), "0"), "request 0: field 'arrival': must be a number, got"),
    "an integer id": (_set(("requests", 2, "id"), 5), "request 2: field 'id': must be a non-empty string, got 5"),
    "a negative predicted time": (
        _set(("steps", 3, "predicted_time"), -1.0),
        "step 3: field 'predicted_time': must be >= 0, got -1.0",
    ),
    "a string predicted time": (
        _set(("steps", 2, "predicted_time"), "x"),
        "step 2: field 'predicted_time': must be a number, got \"x\"",
    ),
    "predicted times beyond a float": (
        lambda d: [s.update(predicted_time=1e308) for s in d["steps"]],
        "field 'steps': the steps' predicted_time values sum beyond the largest number",
    ),
    "prefix caching on": (
        _set(("engine", "enable_prefix_caching"), True),
        "field 'engine': 'enable_prefix_caching': must be false (the executor starts vLLM so), got true",
    ),
    "chunked prefill off": (
        _set(("engine", "enable_chunked_prefill"), False),
        "field 'engine': 'enable_chunked_prefill': must be true",
    ),
    "no step": (_set(("steps",), []), "field 'steps': empty (a plan has at least one step)"),
    "no request": (_set(("requests",), []), "field 'requests': empty (a plan has at least one request)"),
    "steps as an object": (_set(("steps",), {}), "field 'steps': must be a list, got {}"),
    "an unknown top-level key": (_set(("steeps",), []), "field 'steeps': unknown field (known: format, "),
    "an unknown step key": (_set(("steps", 1, "token"), {}), "step 1: field 'token': unknown field"),
    "an unknown engine key": (
        _set(("engine", "gpu_memory_utilization"), 0.5),
        "field 'engine': 'gpu_memory_utilization': unknown field",
    ),
    "no engine": (_drop(("engine",)), "field 'engine': missing"),
    "no block size": (_drop(("engine", "block_size")), "field 'engine': 'block_size': missing"),
    "GPU blocks other than kv_blocks + 1": (
        _set(("engine", "num_gpu_blocks"), 3),
        "field 'engine': 'num_gpu_blocks': must be kv_blocks + 1 = ",
    ),
    "no predicted time": (_drop(("steps", 0, "predicted_time")), "step 0: field 'predicted_time': missing"),
    "no arrival": (_drop(("requests", 1, "arrival")), "request 1: field 'arrival': missing"),
    "a fractional feature": (
        _set(("steps", 1, "features", "n_tok"), 1.5),
        "step 1: field 'features': 'n_tok': must be an integer, got '1.5'",
    ),
    "a missing feature": (_drop(("steps", 1, "features", "s_pre")), "step 1: field 'features': 's_pre': missing"),
    "an unknown feature": (
        _set(("steps", 1, "features", "kv_maxx"), 3),
        "step 1: field 'features': 'kv_maxx': unknown field",
    ),
    "a preempted id that is not a string": (
        _set(("steps", 3, "preempt"), [5]),
        "step 3: field 'preempt': must be a list of request ids, got [5]",
    ),
    "a step that is not an object": (_set(("steps", 4), 7), "step 4: must be an object, got 7"),
    "an instance name that is not a string": (_set(("instance",), 5), "field 'instance': must be a string, got 5"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_plan_field_is_named(case):
    edit, message = BAD[case]
    data = _plan()
    edit(data)
    with pytest.raises(PlanError) as caught:
        ReplayPlan.from_dict(data, "p.json")
    assert str(caught.value).startswith(f"p.json: {message}"), str(caught.value)


@pytest.mark.parametrize("case", ["a boolean version", "prefix caching on", "no engine", "a string predicted time"])
def test_execute_refuses_a_bad_plan_before_looking_for_vllm(tmp_path, capsys, case):
    edit, message = BAD[case]
    data = _plan()
    edit(data)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    out = tmp_path / "r.json"
    code = main(["execute", str(path), "--model", "tiny-llama", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith(f"optsched: error: {path}: {message}") and err.count("\n") == 1, err
    assert not out.exists()


@pytest.mark.parametrize("value", ["-5", "0", "99999999999999999999999", str(2**50 + 1)])
def test_execute_refuses_a_kv_cache_size_out_of_range(tmp_path, capsys, value):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(_plan()))
    code = main(["execute", str(path), "--model", "tiny-llama", "--kv-cache-bytes", value])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("optsched: error: --kv-cache-bytes: must be from 1 to 1,125,899,906,842,624 (1 PiB), got ")
    assert err.count("\n") == 1, err


def test_exported_plans_still_read(tmp_path):
    """An exported plan (saved and read back), one without the optional fields of older plans, and
    one with a JSON integer predicted time read as before."""
    data = _plan()
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    assert load_plan(path).to_dict() == data
    for step in data["steps"]:
        del step["features"]["kv_max"], step["kv_blocks"]
    data["steps"][0]["predicted_time"] = 0
    for key in ("enable_prefix_caching", "enable_chunked_prefill", "kv_capacity_tokens"):
        del data["engine"][key]
    for key in ("predicted_total", "source", "cost_model", "instance"):
        del data[key]
    plan = ReplayPlan.from_dict(data, "older.json")
    assert len(plan.steps) == len(BATCHES) and plan.steps[0].predicted_time == 0.0
