"""The records of a bound report (:func:`optsched.report.gather.build_report`): its bounds, its
policies' runs, its solver's run and the :class:`Report` that holds them, with its best schedule,
best bound and gaps."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..instance import Instance
from ..result import MAXIMISED, OPTIMAL_RTOL, SolveResult, relative_gap
from ..schedule import ReplayResult, Schedule

__all__ = ["BoundEntry", "PolicyRun", "Report", "SolverRun"]


@dataclass(frozen=True)
class BoundEntry:
    """One bound in a report.

    Attributes
    ----------
    source
        ``"generic"`` (cost-model bounds) or the problem whose bounder or solver produced it.
    name, value, valid, note
        As in :class:`optsched.result.Bound`.
    objective
        The objective it bounds.
    comparable
        True when it bounds the report's objective over the same schedules as the policies'
        (generic bounds and bounds of :data:`optsched.report.gather.SCHEDULE_PROBLEMS`), so that
        gaps are measured to it.
    """

    source: str
    name: str
    value: float
    valid: bool
    note: str
    objective: str
    comparable: bool

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class PolicyRun:
    """One policy's schedule, replay and objective.

    ``status``: ``ok``; ``invalid`` (its schedule does not replay cleanly); ``n/a`` (the policy
    rejects the instance with an :class:`~optsched.instance.InstanceError`, e.g. a policy of another
    problem that needs fields this instance lacks); ``error`` (any other exception); ``skipped``
    (not run: the report was cut short).
    """

    policy: str
    status: str
    objective: float | None = None
    schedule: Schedule | None = None
    replay: ReplayResult | None = None
    message: str = ""
    wall_time: float = 0.0


@dataclass
class SolverRun:
    """The exact solver's outcome (``result`` None when it was not run; ``message`` says why)."""

    problem: str
    result: SolveResult | None = None
    replay: ReplayResult | None = None
    message: str = ""
    wall_time: float = 0.0
    #: The seed (e.g. a policy) whose schedule the solver returned, having found none better;
    #: None when the schedule is the solver's own.
    seed: str | None = None

    @property
    def label(self) -> str:
        """The schedule's label: ``solver:PROBLEM``, or ``solver:PROBLEM = seed NAME``."""
        return f"solver:{self.problem}" + (f" = seed {self.seed}" if self.seed else "")


@dataclass
class Report:
    """Everything :func:`~optsched.report.gather.build_report` found; see :mod:`optsched.report.output` for its JSON."""

    instance: Instance
    objective: str
    bounds: list[BoundEntry] = field(default_factory=list)
    policies: list[PolicyRun] = field(default_factory=list)
    solver: SolverRun | None = None
    partial: bool = False
    notes: list[str] = field(default_factory=list)
    time_limit: float | None = None
    wall_time: float = 0.0
    phase_times: dict[str, float] = field(default_factory=dict)
    bounder_times: dict[str, float] = field(default_factory=dict)
    tail_bounds: dict[str, float | None] = field(default_factory=dict)

    @property
    def maximised(self) -> bool:
        """Whether the objective is maximised (goodput): its bounds are upper bounds."""
        return self.objective in MAXIMISED

    @property
    def best_bound(self) -> BoundEntry | None:
        """The tightest proven comparable bound: the largest lower bound, or the least upper bound of a
        maximised objective (None when there is none)."""
        proven = [b for b in self.bounds if b.valid and b.comparable and math.isfinite(b.value)]
        pick = min if self.maximised else max
        return pick(proven, key=lambda b: b.value, default=None)

    def candidates(self) -> list[tuple[str, float, Schedule, ReplayResult]]:
        """(label, objective, schedule, replay) of every schedule that replays cleanly: the solver's
        own first, a seed the solver returned after the policies (a tie names the policy)."""
        out = []
        for p in self.policies:
            if p.status == "ok":
                assert p.objective is not None and p.schedule is not None and p.replay is not None
                out.append((f"policy:{p.policy}", p.objective, p.schedule, p.replay))
        s = self.solver
        if s is not None and s.result is not None and s.replay is not None and s.result.objective is not None:
            assert s.result.schedule is not None
            entry = (s.label, s.result.objective, s.result.schedule, s.replay)
            out.insert(len(out) if s.seed else 0, entry)
        return out

    @property
    def best(self) -> tuple[str, float, Schedule, ReplayResult] | None:
        """The best schedule found (least objective, most when maximised; the solver's first on ties)."""
        pick = max if self.maximised else min
        return pick(self.candidates(), key=lambda c: c[1], default=None)

    @property
    def proven_optimal(self) -> bool:
        """Whether the best schedule's objective meets a proven comparable bound (within 1e-9)."""
        best, bound = self.best, self.best_bound
        if best is None or bound is None:
            return False
        if self.maximised:
            return best[1] >= bound.value * (1 - OPTIMAL_RTOL) - 1e-15
        return best[1] <= bound.value * (1 + OPTIMAL_RTOL) + 1e-15

    def gap(self, value: float | None) -> float | None:
        """Relative gap of ``value`` to the best proven bound: (bound - value) / bound when maximised."""
        bound = self.best_bound
        if self.maximised and bound is not None and value is not None:
            return (bound.value - value) / max(abs(bound.value), 1e-12)
        return relative_gap(value, None if bound is None else bound.value)
