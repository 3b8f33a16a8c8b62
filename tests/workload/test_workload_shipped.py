"""The shipped slices of real traces equal their recipes (optsched.workload.shipped)."""

from __future__ import annotations

from optsched.instance import available_instances, load_instance
from optsched.workload.shipped import TRACE_SLICES, trace_slice


def test_shipped_slices_load_by_name():
    for name, recipe in TRACE_SLICES.items():
        assert name in available_instances()
        inst = load_instance(name)
        assert len(inst.requests) == recipe.rows and inst.cost_model.name == recipe.cost_model
        assert inst.limits == recipe.limits and "MIT licence" in inst.extra["source"]


def test_shipped_slices_equal_their_recipes(data_dir):
    for name in TRACE_SLICES:
        assert load_instance(name).to_dict() == trace_slice(name, data_dir).to_dict()
