"""G-maximisation's slot data (gmax/slots.py): the group start bound and the time budget."""

import numpy as np

from optsched.problems.gmax.problem import g_core
from optsched.problems.gmax.slots import SlotData
from tests.support.gmax import small_instance
from tests.support.static_exhaustive import ordered_partitions


def test_group_max_start_bound_is_a_lower_bound():
    from optsched.problems.gmax.slots import group_max_bound

    rng = np.random.default_rng(5)
    for _ in range(200):
        lengths = rng.uniform(0.1, 5.0, int(rng.integers(1, 9)))
        bmax = int(rng.integers(1, 4))
        bound = group_max_bound(lengths, bmax)
        # any batching of any p of the requests lasts at least bound[p]
        p = int(rng.integers(0, len(lengths) + 1))
        members = list(rng.permutation(len(lengths))[:p])
        total = 0.0
        while members:
            size = int(rng.integers(1, bmax + 1))
            total += max(lengths[members[:size]])
            members = members[size:]
        assert total >= bound[p] - 1e-12
    for seed in range(6):
        p = small_instance(seed)
        t_min = min(g_core(p, b)[1] for b in ordered_partitions(p))
        assert SlotData.build(p).t_lower_bound() <= t_min + 1e-9


def test_time_budget_caps_every_start_of_cheaper_schedules():

    for seed in range(8):
        p = small_instance(seed)
        data = SlotData.build(p)
        schedules = list(ordered_partitions(p))
        ts = sorted(g_core(p, b)[1] for b in schedules)
        for t_max in (ts[0], ts[len(ts) // 4], ts[len(ts) // 2]):
            cap = data.start_cap(t_max)
            for batches in schedules:
                if g_core(p, batches)[1] > t_max:
                    continue
                # S_q of the model: total duration of the batches ending at positions <= q
                ends, start, pos = [0.0] * (p.n_requests + 1), 0.0, 0
                for b in batches:
                    start += max(p.times.exec[i, len(b) - 1] for i in b)
                    pos += len(b)
                    ends[pos] = start
                s_q = np.maximum.accumulate(ends)
                assert all(s_q[q] <= cap[q] + 1e-9 for q in range(p.n_requests))
