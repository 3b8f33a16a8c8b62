"""Instances built in code (``Instance.with_requests``, ``Request(...)``) meet the API's entry points
(``optsched.solve``, ``bound``, ``simulate``) with the rules of an instance file, and ``replay`` and
``load_instance`` name what they take: a duplicate id made the online hybrid policy loop forever,
an empty instance divided by zero, a negative prompt reached the engine."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import optsched
from optsched.instance import SLO, Instance, InstanceError, Limits, check_instance, load_instance
from tests.support.paths import INSTANCES

TOY = load_instance("toy-4")
FIRST = TOY.requests[0]

BAD = {
    "a duplicate id": ([FIRST, FIRST], "request 'r0': field 'id': duplicate id"),
    "no request": ([], "field 'requests': no request"),
    "a negative prompt": ([replace(FIRST, prompt_tokens=-3)], "field 'prompt_tokens': Input should be greater"),
    "a NaN arrival": ([replace(FIRST, arrival=math.nan)], "field 'arrival': Input should be a finite number"),
    "a boolean output": ([replace(FIRST, output_tokens=True)], "field 'output_tokens': Input should be a valid int"),
    "a fractional prompt": ([replace(FIRST, prompt_tokens=2.5)], "field 'prompt_tokens': Input should be a valid int"),
    "a negative SLO": ([replace(FIRST, slo=SLO(ttft=-1.0))], "field 'slo.ttft': Input should be greater than 0"),
    "an SLO mapping": ([replace(FIRST, slo={"ttft": 1})], "request #0: field 'slo': of type dict"),
    "a mapping for a request": ([{"id": "a"}], "request #0: a Request, got dict"),
    "an integer id": ([replace(FIRST, id=5)], "request #0: field 'id': Value error, must be a string"),
    "too many tokens": ([replace(FIRST, prompt_tokens=10**30)], "exceeds 10,000,000 tokens"),
}


def call_api(call: str, instance: Instance, policy: str) -> object:
    """``optsched.solve``, ``bound`` (InferMax) or ``simulate`` (``policy``) of ``instance``."""
    if call == "solve":
        return optsched.solve(instance, problem="infermax", time_limit=3)
    if call == "bound":
        return optsched.bound(instance, problem="infermax")
    return optsched.simulate(instance, policy)


@pytest.mark.parametrize("case", sorted(BAD))
@pytest.mark.parametrize("call", ["solve", "bound", "simulate"])
def test_a_bad_built_instance_is_refused_at_the_api(case, call) -> None:
    requests, message = BAD[case]
    with pytest.raises(InstanceError, match=re.escape(message)):
        call_api(call, TOY.with_requests(requests), "hybrid")


def test_bad_limits_of_a_built_instance_are_named() -> None:
    bad = replace(TOY, limits=Limits(token_budget=0))
    with pytest.raises(InstanceError, match="field 'limits.token_budget'"):
        check_instance(bad)


TOP_BAD = {
    "a profile name for the cost model": (
        {"cost_model": "llama2-7b-a100"},
        "instance 'toy-4': field 'cost_model': a CostModel, got str (load_cost_model(NAME) makes one",
    ),
    "no cost model": ({"cost_model": None}, "instance 'toy-4': field 'cost_model': a CostModel, got NoneType"),
    "an empty name": ({"name": ""}, "instance: field 'name': must be a non-empty string, got ''"),
    "an integer name": ({"name": 5}, "instance: field 'name': must be a non-empty string, got int"),
}


@pytest.mark.parametrize("case", sorted(TOP_BAD))
@pytest.mark.parametrize("call", ["solve", "bound", "simulate"])
def test_a_bad_name_or_cost_model_is_refused_at_the_api(case, call) -> None:
    fields, message = TOP_BAD[case]
    with pytest.raises(InstanceError, match=re.escape(message)):
        call_api(call, replace(TOY, **fields), "vllm")


def test_a_usual_built_instance_passes_numpy_integers_included() -> None:
    built = TOY.with_requests([replace(r, prompt_tokens=np.int64(r.prompt_tokens)) for r in TOY.requests])
    assert built.checked() is built
    schedule, replayed = optsched.simulate(built, "vllm")
    assert replayed.feasible and replayed.metrics.makespan == optsched.simulate(TOY, "vllm")[1].metrics.makespan


def test_a_read_instance_is_checked_as_read_and_a_copy_again() -> None:
    assert TOY.checked() is TOY
    copy = TOY.with_requests([FIRST, FIRST])
    with pytest.raises(InstanceError, match="duplicate id"):
        copy.checked()
    with pytest.raises(InstanceError, match="duplicate id"):  # not marked checked by a failure
        copy.checked()


@pytest.mark.parametrize(
    ("instance", "schedule", "message"),
    [
        (TOY, None, "schedule: a Schedule or a sequence of Batch, got NoneType"),
        (TOY, {"batches": []}, "got dict"),
        (TOY, "s.json", "got str"),
        (TOY, [{"items": []}], "a sequence of Batch holds something else"),
        (None, [], "instance: an Instance"),
        ("toy-4", [], "instance: an Instance"),
    ],
)
def test_replay_names_what_it_takes(instance, schedule, message) -> None:
    with pytest.raises(TypeError, match=re.escape(message)):
        optsched.replay(instance, schedule)


def test_load_instance_names_what_it_takes() -> None:
    with pytest.raises(TypeError, match="path: a file or a shipped instance's name, got dict"):
        load_instance({"name": "x"})  # type: ignore[arg-type]
    with pytest.raises(InstanceError, match="an instance file name is empty"):
        load_instance("")
    assert isinstance(load_instance("toy-4"), Instance)


def test_a_relative_profile_path_is_read_from_the_instance_files_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``"cost_model": "../models/x.toml"`` names the file beside the instance's folder, wherever
    the command runs."""
    (tmp_path / "models").mkdir()
    (tmp_path / "inst").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "models" / "x.toml").write_text('name = "x"\nbase = 0.004\nper_token = 1e-5\n')
    data = json.loads((INSTANCES / "toy-4.json").read_text())
    data["cost_model"] = "../models/x.toml"
    (tmp_path / "inst" / "i.json").write_text(json.dumps(data))
    monkeypatch.chdir(tmp_path / "elsewhere")
    inst = load_instance(tmp_path / "inst" / "i.json")
    assert inst.cost_model.base == 0.004 and inst.cost_model.per_token == 1e-5
