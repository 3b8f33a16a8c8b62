"""Aladdin's heuristics (aladdin/heuristics.py): the JSQ, power-of-two and round-robin baselines, rebalancing."""

from __future__ import annotations

import random
from dataclasses import replace

from optsched.problems.aladdin.heuristics import best_fit, jsq, power_of_two, rebalance, round_robin
from optsched.problems.aladdin.models import AladdinModel, model_from_instance
from optsched.problems.aladdin.placement import Job, PlacementProblem, check_placement, compile_problem
from tests.support.aladdin import aladdin_instance, random_heartbeat, random_requests


def test_baselines():
    rng = random.Random(3)
    m = model_from_instance(aladdin_instance(random_requests(rng, 1)))
    problem = replace(random_heartbeat(rng, m, 4, 8), max_workers=4)
    for fn in (jsq, round_robin, power_of_two):
        r = fn(problem)
        assert set(r.assignment) == {j.id for j in problem.new}
        assert all(0 <= i < 4 for i in r.assignment.values())
    counts = [len(o) for o in problem.ongoing]
    r = jsq(problem)
    for job in problem.new:
        counts[r.assignment[job.id]] += 1
    assert max(counts) - min(counts) <= max(
        1, max(len(o) for o in problem.ongoing) - min(len(o) for o in problem.ongoing)
    )


def test_rebalance_moves_new_requests_towards_overestimated_workers():
    m = AladdinModel(
        k1=1e-5,
        c1=1e-4,
        k2=1e-6,
        c2=1e-4,
        c3=0.01,
        kv_per_token=1,
        kv_per_request=0,
        kv_capacity=10_000,
        ttft=1.0,
        atgt=0.05,
    )
    ongoing = ((Job("a", 50, 20, 5, 0.1), Job("b", 50, 20, 5, 0.1)), (Job("c", 10, 5, 2, 0.05),))
    problem = PlacementProblem(m, ongoing, tuple(Job(f"n{k}", 20, 10) for k in range(4)))
    bf = best_fit(problem)
    assert set(bf.assignment.values()) == {0}  # best fit fills the fuller worker first
    errors = [(60.0, 2.0), (-40.0, -1.0)]  # worker 0 underestimated, worker 1 overestimated

    def total(assign):
        le, be = [e[0] for e in errors], [e[1] for e in errors]
        for i in assign.values():
            le[i] += 10
            be[i] += 1
        return sum(abs(m.k2 * l + m.c2 * b) for l, b in zip(le, be))

    rb = rebalance(problem, bf, errors)
    assert any(i == 1 for i in rb.assignment.values())
    assert total(rb.assignment) < total(bf.assignment)
    assert check_placement(compile_problem(problem), rb.assignment) == []
