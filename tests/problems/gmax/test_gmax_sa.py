"""G-maximisation's heuristics (gmax/sa.py): instance assignment, Algorithm 2, the local search's budget."""

import pytest

from optsched.instance import parse_instance
from optsched.problems.gmax.problem import GmaxProblem, evaluate_g, g_core
from optsched.problems.gmax.sa import (
    SAParams,
    inst_assign,
    slo_aware_scheduling,
)
from tests.support.gmax_generate import random_gmax_instance


def test_inst_assign_balances_by_remaining_memory():
    p = GmaxProblem.from_instance(parse_instance(random_gmax_instance(8, 2)))
    cap = max(p.need) * 3
    parts = inst_assign(p, [cap, cap])
    assert sorted(i for part in parts for i in part) == list(range(8))
    assert all(parts) and abs(len(parts[0]) - len(parts[1])) <= 2
    with pytest.raises(ValueError, match="needs"):
        inst_assign(p, [min(p.need) - 1])


def test_algorithm2_schedules_each_instance_and_sums_g():
    p = GmaxProblem.from_instance(parse_instance(random_gmax_instance(9, 4)))
    cap = max(p.need) * 4
    schedules, n, t = slo_aware_scheduling(p, [cap, cap, cap], SAParams(iters=10))
    assert sorted(i for sched in schedules for b in sched for i in b) == list(range(9))
    parts = inst_assign(p, [cap, cap, cap])
    judged = [
        evaluate_g(p.subset(part), [[part.index(i) for i in b] for b in sched])
        for part, sched in zip(parts, schedules)
        if part
    ]
    assert n == sum(j.n for j in judged) and t == pytest.approx(sum(j.t for j in judged))


def test_local_search_stops_inside_an_ascent_step_when_its_budget_expires(monkeypatch):
    """One ascent step of ``local_search`` evaluates O(N^2) neighbours (1.7 s at N = 70); once its
    budget has expired it evaluates at most ``DEADLINE_EVERY`` more (the exact solver polishes its
    incumbents with it inside the time limit)."""
    from optsched.problems.gmax import sa

    p = GmaxProblem.from_instance(parse_instance(random_gmax_instance(40, 0, max_batch_size=4)))
    start = sa.chunked(p, range(p.n_requests))
    checks, evaluations = [], []

    class ExpiresAtTheSecondCheck:
        def expired(self) -> bool:
            checks.append(1)
            return len(checks) > 1

    monkeypatch.setattr(sa, "g_core", lambda problem, batches: evaluations.append(1) or g_core(problem, batches))
    out = sa.local_search(p, start, ExpiresAtTheSecondCheck())
    assert 1 < len(evaluations) <= 1 + sa.DEADLINE_EVERY
    assert sorted(j for b in out for j in b) == list(range(p.n_requests))
