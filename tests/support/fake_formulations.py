"""Test-only formulation for the solve/bound commands (registered by monkeypatching the registries).

``options["method"]`` picks what it returns, so every status path of the CLI can be exercised.
"""

from __future__ import annotations

import random

from optsched.budget import TimeBudget
from optsched.instance import Instance
from optsched.result import Bound, SolveResult, replayed_objective
from optsched.schedule import Schedule
from tests.support.legal_schedules import random_legal_schedule

#: The options dict of the last call (the tests inspect it).
LAST_OPTIONS: dict = {}
#: The time budget of the last solve or bounds (the tests inspect it).
LAST_BUDGET: list[TimeBudget] = []


def solve(instance: Instance, options: dict, budget: TimeBudget) -> SolveResult:
    LAST_OPTIONS.clear()
    LAST_OPTIONS.update(options)
    LAST_BUDGET[:] = [budget]
    method = options.get("method") or "feasible"
    if method in ("feasible", "optimal"):
        schedule = random_legal_schedule(instance, random.Random(0)).schedule
        value, rep = replayed_objective(instance, schedule, "makespan")
        return SolveResult(
            problem="fake",
            solver="none",
            status=method,
            objective=value,
            bound=value * 0.5,
            wall_time=0.01,
            schedule=schedule,
            replay=rep,
        )
    if method == "bad-schedule":
        return SolveResult(
            problem="fake",
            solver="none",
            status="feasible",
            objective=1.0,
            bound=0.5,
            wall_time=0.01,
            schedule=Schedule(instance.name, ()),
        )
    if method == "unsupported":
        return SolveResult(problem="fake", solver="none", status="unsupported", message="fake cannot do this")
    return SolveResult(problem="fake", solver="none", status=method)


def bounds(instance: Instance, options: dict, budget: TimeBudget) -> list[Bound]:
    LAST_OPTIONS.clear()
    LAST_OPTIONS.update(options)
    LAST_BUDGET[:] = [budget]
    return [Bound("fake-lower", 1.25, True, "test"), Bound("fake-estimate", 2.0, False, "test")]
