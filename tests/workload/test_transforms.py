"""Workload transforms (:mod:`optsched.workload.transforms`): each step, their order, their errors."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from optsched.cli import main
from optsched.costmodel import load_cost_model
from optsched.instance import SLO, Instance, Limits, Request
from optsched.workload import WorkloadError, WorkloadTransforms, apply_transforms, parse_window


def _instance(n: int = 10) -> Instance:
    reqs = [Request(f"r{k}", float(k), 10 * (k + 1), k + 1, predicted_output_tokens=k + 2) for k in range(n)]
    return Instance("w", load_cost_model("llama2-7b-a100"), Limits(), tuple(reqs))


def _ids(inst: Instance) -> list[str]:
    return [r.id for r in inst.requests]


def test_identity_returns_the_instance():
    inst = _instance()
    assert WorkloadTransforms().is_identity
    assert apply_transforms(inst, WorkloadTransforms()) is inst


def test_first_window_sample():
    inst = _instance()
    assert _ids(apply_transforms(inst, WorkloadTransforms(first=3))) == ["r0", "r1", "r2"]
    win = apply_transforms(inst, WorkloadTransforms(window=(2.0, 5.0)))
    assert _ids(win) == ["r2", "r3", "r4"] and [r.arrival for r in win.requests] == [0.0, 1.0, 2.0]
    assert win.name == "w-window2-5"
    sampled = apply_transforms(inst, WorkloadTransforms(sample=0.3, seed=4))
    rng = np.random.default_rng(4)
    expect = sorted(rng.choice(10, size=3, replace=False).tolist())
    assert _ids(sampled) == [f"r{k}" for k in expect]
    again = apply_transforms(inst, WorkloadTransforms(sample=0.3, seed=4))
    assert _ids(again) == _ids(sampled)
    assert apply_transforms(inst, WorkloadTransforms(sample=1.0)).requests == inst.requests


def test_order_first_before_window_before_rate_scale():
    inst = _instance()
    out = apply_transforms(inst, WorkloadTransforms(first=6, window=(4.0, math.inf), rate_scale=2.0))
    # first 6 (r0..r5), then arrivals >= 4 (r4, r5) shifted to 0, 1, then halved.
    assert _ids(out) == ["r4", "r5"] and [r.arrival for r in out.requests] == [0.0, 0.5]
    assert out.name == "w-6-window4-inf-rate2"


def test_clip_offline_and_default_slos():
    inst = _instance(4).with_requests([
        *_instance(3).requests,
        Request("s", 3.0, 5, 5, slo=SLO(ttft=1.0)),
    ])
    out = apply_transforms(
        inst, WorkloadTransforms(clip_prompt=15, clip_output=2, offline=True, slo_ttft=0.5, slo_tpot=0.1)
    )
    assert [(r.prompt_tokens, r.output_tokens, r.predicted_output_tokens) for r in out.requests] == [
        (10, 1, 2),
        (15, 2, 2),
        (15, 2, 2),
        (5, 2, None),
    ]
    assert all(r.arrival == 0.0 for r in out.requests)
    assert [r.slo for r in out.requests] == [SLO(ttft=0.5, tpot=0.1)] * 3 + [SLO(ttft=1.0, tpot=0.1)]


@pytest.mark.parametrize(
    "t",
    [
        WorkloadTransforms(window=(100.0, 200.0)),
        WorkloadTransforms(first=2, window=(5.0, 9.0)),
        WorkloadTransforms(sample=0.01),
    ],
)
def test_a_transform_that_leaves_nothing_is_an_error(t):
    with pytest.raises(WorkloadError, match="leaves no request"):
        apply_transforms(_instance(), t, source="f.csv")


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"first": 0}, "first"),
        ({"sample": 1.5}, "sample"),
        ({"seed": 3}, "seed"),
        ({"rate_scale": 0.0}, "rate_scale"),
        ({"clip_output": -1}, "clip_output"),
        ({"window": (5.0, 5.0)}, "window"),
        ({"slo_ttft": math.inf}, "slo_ttft"),
    ],
)
def test_bad_values_name_the_transform(kwargs, field):
    with pytest.raises(WorkloadError, match=field):
        WorkloadTransforms(**kwargs)


def test_parse_window():
    assert parse_window("60:120") == (60.0, 120.0)
    assert parse_window(":5") == (0.0, 5.0) and parse_window("5:") == (5.0, math.inf)
    for bad in ("5", "a:b", "9:3", "-1:4"):
        with pytest.raises(WorkloadError):
            parse_window(bad)


def test_cli_transforms_and_their_errors(capsys):
    assert main(["info", "poisson-mixed-100", "--window", "2:4", "--rate-scale", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["instance"] == "poisson-mixed-100-window2-4-rate2"
    assert 0 <= out["arrival"]["first"] and out["arrival"]["last"] < 1.0
    assert main(["info", "poisson-mixed-100", "--window", "1000:2000"]) == 2
    err = capsys.readouterr().err
    assert "poisson-mixed-100" in err and "'window' leaves no request" in err
    assert main(["info", "toy-4", "--seed", "3"]) == 2
    assert "--seed: only applies with --sample" in capsys.readouterr().err
    assert main(["info", "toy-4", "--sample", "0"]) == 2


def test_info_out_saves_the_transformed_instance(capsys, tmp_path):
    out = tmp_path / "slice.json"
    assert main(["info", "poisson-mixed-100", "--first", "10", "--rate-scale", "2", "--out", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["path"] == str(out)
    from optsched.instance import load_instance

    saved = load_instance(str(out))
    expect = apply_transforms(load_instance("poisson-mixed-100"), WorkloadTransforms(first=10, rate_scale=2.0))
    assert saved.name == "poisson-mixed-100-10-rate2" and saved.requests == expect.requests
    assert main(["info", "toy-4", "--kv-capacity", "50", "--out", str(tmp_path / "no.json")]) == 1
    assert "not written" in capsys.readouterr().err and not (tmp_path / "no.json").exists()
