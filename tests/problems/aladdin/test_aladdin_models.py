"""Aladdin's models (aladdin/models.py): the cost model's mapping and Eq. 4, the instances they refuse."""

from __future__ import annotations

import dataclasses

import pytest

from optsched.instance import InstanceError, load_instance, parse_instance
from optsched.problems.aladdin.models import MAX_SECONDS, model_from_instance
from tests.support.aladdin import aladdin_instance


def test_cost_model_mapping_and_eq4():
    inst = load_instance("aladdin-fig3")
    m = model_from_instance(inst)
    cost = inst.cost_model
    assert cost.prefill_time(37) == pytest.approx(m.prefill_time(37))
    assert cost.decode_time(5, 123) == pytest.approx(m.decode_time(5, 123))
    for b in (1, 2, 7):  # Eq. 4 is the inverse of Eq. 3 at t_d = T_dec
        assert m.decode_time(b, m.context_limit(b)) == pytest.approx(m.atgt)
    assert m.kv(10) == 10


def test_model_rejects_quadratic_prefill_and_missing_slo():

    data = {
        "name": "x",
        "cost_model": "llama2-7b-a100",
        "limits": {"kv_capacity": 100},
        "slo": {"ttft": 1, "atgt": 0.05},
        "requests": [{"id": "a", "prompt_tokens": 3, "output_tokens": 2}],
    }
    with pytest.raises(InstanceError, match="per_token_sq"):
        model_from_instance(parse_instance(data))
    data["cost_model"] = {"prefill": {"per_token": 1e-4}, "decode": {"bias": 0.01}}
    del data["slo"]
    with pytest.raises(InstanceError, match="slo.ttft"):
        model_from_instance(parse_instance(data))


def test_model_rejects_times_beyond_the_integer_data():
    """A coefficient or SLO above MAX_SECONDS is bad input naming the field (it overflowed the
    nanosecond data: OverflowError, exit 3); MAX_SECONDS itself is accepted."""
    reqs = [{"id": "a", "prompt_tokens": 3, "output_tokens": 2}]
    ok = aladdin_instance(reqs)
    assert model_from_instance(ok).c1 == pytest.approx(0.002)
    at_limit = aladdin_instance(reqs, ttft=MAX_SECONDS)
    assert model_from_instance(at_limit).ttft == MAX_SECONDS
    with pytest.raises(InstanceError, match=r"slo.ttft.*exceeds"):
        model_from_instance(aladdin_instance(reqs, ttft=MAX_SECONDS * 10))
    big = parse_instance({
        "name": "big",
        "limits": {"kv_capacity": 60},
        "slo": {"ttft": 0.02, "atgt": 0.05},
        "cost_model": {
            "layers": 10000,
            "prefill": {"bias": 1000, "per_token": 0.0005},
            "decode": {"bias": 0.02, "per_kv": 0.0002},
        },
        "requests": reqs,
    })  # within the cost model's caps (docs/costmodel.md), 10^7 s a prefill
    with pytest.raises(InstanceError, match=r"cost_model' \(prefill bias\).*exceeds"):
        model_from_instance(big)


def test_model_rejects_a_worker_without_kv_memory():
    """``placement.kv_capacity: 0`` holds no request: bad input naming the field (it answered
    "infeasible" with a placement); a positive capacity is read as given."""
    reqs = [{"id": "a", "prompt_tokens": 3, "output_tokens": 2}]
    inst = aladdin_instance(reqs)
    for kv in (7, 0):
        placement = {**inst.extra["placement"], "kv_capacity": kv}
        with_kv = dataclasses.replace(inst, extra={**inst.extra, "placement": placement})
        if kv:
            assert model_from_instance(with_kv).kv_capacity == kv
            continue
        with pytest.raises(InstanceError, match=r"placement.kv_capacity': must be a finite number > 0"):
            model_from_instance(with_kv)


def test_a_zero_slo_is_named_as_zero_not_missing():
    reqs = [{"id": "a", "prompt_tokens": 3, "output_tokens": 2}]
    for key in ("ttft", "atgt"):
        inst = aladdin_instance(reqs)
        zero = dataclasses.replace(inst, extra={**inst.extra, "slo": {**inst.extra["slo"], key: 0}})
        with pytest.raises(InstanceError, match=rf"field 'slo.{key}': must be a finite number > 0, got 0$"):
            model_from_instance(zero)
