"""Aladdin's placement data (aladdin/placement.py): the incremental KV profile equals a recomputation."""

from __future__ import annotations

import random

import numpy as np

from optsched.problems.aladdin.models import AladdinModel
from optsched.problems.aladdin.placement import compile_problem
from tests.support.aladdin import random_heartbeat


def test_incremental_kv_profile_matches_recomputation():
    rng = random.Random(9)
    m = AladdinModel(
        k1=1e-5,
        c1=1e-4,
        k2=1e-6,
        c2=1e-4,
        c3=0.01,
        kv_per_token=1.5,
        kv_per_request=2.5,
        kv_capacity=10_000,
        ttft=1.0,
        atgt=0.05,
    )
    for _ in range(20):
        problem = random_heartbeat(rng, m, 1, 6)
        cp = compile_problem(problem)
        load = cp.loads[0].copy()
        load.peak_kv()  # build the cached profile, then update it incrementally
        for job in problem.new:
            expected = load.peak_kv(job)
            load.add(job)
            fresh = cp.loads[0].copy()
            fresh.forget_profile()
            for j in load.new:
                fresh.add(j)
            assert load.peak_kv() == expected == fresh.peak_kv()
            assert np.array_equal(load.load_profile()[1], fresh.load_profile()[1])
