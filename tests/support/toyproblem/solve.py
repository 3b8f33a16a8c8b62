r"""``best-policy``: the best schedule among a list of policies, with the trivial makespan bound.

The worked example of docs/development.md: a formulation is a ``solve`` and a ``bounds`` function
and their options dataclasses; one :class:`optsched.problems.Formulation` record registers it.

Mathematics: for an instance with requests :math:`R` and the schedules :math:`S_p` of the
policies :math:`p \in P`, the answer is :math:`\arg\min_p \mathrm{makespan}(S_p)` (each schedule
replayed by :func:`optsched.schedule.replay`), and the bound is the proven makespan lower bound of
:func:`optsched.bounds.generic_bounds` (the larger of the critical path and the work bound). The
answer is ``optimal`` when its makespan meets the bound, else ``feasible``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from optsched.bounds import generic_bounds
from optsched.budget import TimeBudget
from optsched.instance import Instance
from optsched.options import Name, Options, PositiveFloat
from optsched.policies import simulator_for
from optsched.result import Bound, SolveResult, Status, replayed_objective

__all__ = ["ToyBoundOptions", "ToyOptions", "bounds", "solve"]


@dataclass(frozen=True)
class ToyOptions(Options):
    """Options of ``best-policy``'s ``solve``.

    Attributes
    ----------
    policies
        Comma-separated policy names (:data:`optsched.policies.POLICIES`).
    time_limit
        Seconds (:func:`optsched.api.solve` makes it the solve's budget); honoured trivially: the
        policies take milliseconds.
    """

    problem = "best-policy"
    policies: Name = "vllm,sarathi"
    time_limit: PositiveFloat | None = None


@dataclass(frozen=True)
class ToyBoundOptions(Options):
    """Options of ``best-policy``'s ``bounds``: only the time limit."""

    problem = "best-policy"
    what = "bound"
    time_limit: PositiveFloat | None = None


def bounds(instance: Instance, options: Mapping[str, Any] | ToyBoundOptions | None, budget: TimeBudget) -> list[Bound]:
    """The proven makespan lower bound (module docstring); it takes none of ``budget``."""
    ToyBoundOptions.parse(options)
    best = max(generic_bounds(instance, "makespan"), key=lambda b: b.value)
    return [Bound("makespan", best.value, True, f"the largest generic makespan bound ({best.name})")]


def solve(instance: Instance, options: Mapping[str, Any] | ToyOptions | None, budget: TimeBudget) -> SolveResult:
    """The best of the policies' schedules (module docstring); one policy at least, no other once
    ``budget`` has expired."""
    opts = ToyOptions.parse(options)
    t0 = time.perf_counter()
    runs = []
    for name in opts.policies.split(","):
        if runs and budget.expired():
            break
        schedule = simulator_for(name)(instance)
        value, replay = replayed_objective(instance, schedule, "makespan")
        runs.append((value, name, schedule, replay))
    value, name, schedule, replay = min(runs, key=lambda run: run[0])
    bound = bounds(instance, None, budget)[0].value
    return SolveResult(
        problem="best-policy",
        solver=name,
        status=Status.OPTIMAL if value <= bound else Status.FEASIBLE,
        objective=value,
        bound=bound,
        wall_time=time.perf_counter() - t0,
        schedule=schedule,
        replay=replay,
        incumbent=f"policy {name}",
    )
