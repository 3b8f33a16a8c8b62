"""G-maximisation's slot MILP (gmax/milp.py): every schedule is a point of the model."""

import numpy as np
import pytest

from optsched.problems.gmax.problem import g_core
from optsched.problems.gmax.slots import SlotData
from tests.support.gmax import small_instance
from tests.support.static_exhaustive import ordered_partitions


def test_every_schedule_satisfies_every_milp_constraint():
    """The MILP cuts off no schedule: at the values of a schedule (set as the MIP start), every
    constraint and variable bound holds, cuts included (mean, leader count, time-budget caps with
    t_max = the schedule's own t), and the model's n and t are the evaluator's."""
    import pulp

    from optsched.problems.gmax.milp import MilpBackend

    rng = np.random.default_rng(7)
    for seed in range(10):
        p = small_instance(seed)
        data = SlotData.build(p)
        schedules = list(ordered_partitions(p))
        for k in rng.choice(len(schedules), size=min(25, len(schedules)), replace=False):
            batches = schedules[k]
            n, t = g_core(p, batches)
            backend = MilpBackend(data)
            backend.hint = batches
            prob, parts = backend.build_model(pulp.LpMaximize, t_max=t + 1e-6)  # float slack of the caps
            assert [con.name for con in prob.constraints() if not con.valid(1e-7)] == [], batches
            assert [var.name for var in prob.variables() if not var.valid(1e-7)] == [], batches
            assert pulp.value(parts["n"]) == n
            assert pulp.value(parts["t"]) == pytest.approx(t, rel=1e-9)
