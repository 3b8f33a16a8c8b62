"""A cell's instance without a profile override (limits validated, nothing parsed again) equals
the one the instance parser builds from the base's JSON, errors included."""

from __future__ import annotations

import dataclasses

import pytest

from optsched.instance import InstanceError, load_instance
from optsched.sweep.workloads import cell_instance

OVERRIDES = [
    {},
    {"token_budget": 1024},
    {"token_budget": 1024, "prefill_budget": 512},
    {"prefill_budget": 256},
    {"kv_capacity": 80_000},
    {"kv_capacity": None, "max_running": 8},
    {"token_budget": None},
    {"kv_capacity": 10},  # a request that can never fit
    {"token_budget": 0},  # out of range
    {"prefill_budget": 10**9},  # P > C
    {"max_running": -1},
]


def _parsed(base, limits: dict, rate_scale: float):
    """The same cell through the parser: the base's own coefficients given as an override."""
    coefficients = {**base.cost_model.to_dict(), "name": base.cost_model.name}
    return cell_instance(base, coefficients, limits, rate_scale)


@pytest.mark.parametrize("name", ["poisson-mixed-100", "toy-4"])
@pytest.mark.parametrize("limits", OVERRIDES)
@pytest.mark.parametrize("rate_scale", [1.0, 4.0])
def test_a_cell_without_a_profile_equals_the_parsed_one(name: str, limits: dict, rate_scale: float) -> None:
    base = load_instance(name)
    try:
        expected = _parsed(base, limits, rate_scale)
    except InstanceError as exc:
        with pytest.raises(InstanceError) as got:
            cell_instance(base, None, limits, rate_scale)
        assert str(got.value) == str(exc)
        return
    got = cell_instance(base, None, limits, rate_scale)
    assert got.cost_model == base.cost_model  # the base's profile itself, its ``source`` text included
    # the parser rebuilds the profile from its coefficients, without the ``source`` text
    assert dataclasses.replace(got, cost_model=dataclasses.replace(got.cost_model, source="")) == expected
