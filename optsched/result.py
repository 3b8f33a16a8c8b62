"""Backend-neutral results shared by every formulation: :class:`SolveResult` and :class:`Bound`.

A formulation's ``solve`` returns a :class:`SolveResult`. When it produces an iteration-level
schedule, :func:`replayed_objective` recomputes its objective with :func:`optsched.schedule.replay`;
the reported objective is that replayed value, and :func:`check_agreement` rejects a solver whose own
value disagrees with it (a modelling bug, never silently reported).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from .instance import Instance
from .schedule import ReplayResult, Schedule, replay

__all__ = ["Bound", "SolveResult", "Status", "check_agreement", "relative_gap", "replayed_objective"]

Status = Literal["optimal", "feasible", "infeasible", "time_limit", "unsupported", "error"]


@dataclass(frozen=True)
class Bound:
    """A bound on an objective.

    Attributes
    ----------
    name
        What it is (e.g. ``"work"``, ``"lp-relaxation"``).
    value
        Its value, in the objective's unit and sense (a lower bound for minimisation).
    valid
        True when it is proven under the model; False for heuristic or paper estimates.
    note
        Short explanation.
    """

    name: str
    value: float
    valid: bool = True
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "value": self.value, "valid": self.valid, "note": self.note}


@dataclass
class SolveResult:
    """What ``optsched solve`` reports (docs/cli.md)."""

    problem: str
    solver: str
    status: Status
    objective: float | None = None
    bound: float | None = None
    wall_time: float = 0.0
    schedule: Schedule | None = None
    sense: Literal["min", "max"] = "min"
    extra: dict[str, Any] = field(default_factory=dict)
    replay: ReplayResult | None = None

    @property
    def gap(self) -> float | None:
        """Relative gap |objective - bound| / |objective| (None when either is missing)."""
        return relative_gap(self.objective, self.bound)

    def to_dict(self, schedule_path: str | None = None) -> dict[str, Any]:
        out = {
            "problem": self.problem,
            "solver": self.solver,
            "status": self.status,
            "objective": self.objective,
            "bound": self.bound,
            "gap": self.gap,
            "wall_time": self.wall_time,
            "schedule": schedule_path,
        }
        if self.replay is not None and self.replay.metrics is not None:
            out["metrics"] = self.replay.metrics.to_dict()
        out.update(self.extra)
        return out


def relative_gap(objective: float | None, bound: float | None) -> float | None:
    """|objective - bound| / max(|objective|, tiny); None if either is None."""
    if objective is None or bound is None or not math.isfinite(objective) or not math.isfinite(bound):
        return None
    return abs(objective - bound) / max(abs(objective), 1e-12)


OBJECTIVES = ("makespan", "completion", "ttft")


def replayed_objective(instance: Instance, schedule: Schedule, objective: str = "makespan") -> tuple[float, ReplayResult]:
    """Replay a schedule and return its objective value and the replay.

    Parameters
    ----------
    objective
        ``makespan`` (end of last batch), ``completion`` (sum of finish times) or ``ttft``
        (mean time to first token).

    Raises
    ------
    RuntimeError
        When the schedule does not replay cleanly (a bug in the code that produced it).
    """
    result = replay(instance, schedule)
    if not result.feasible:
        raise RuntimeError("produced schedule does not replay cleanly: " + "; ".join(result.violations[:5]))
    return objective_of(result, objective), result


def objective_of(result: ReplayResult, objective: str = "makespan") -> float:
    """The objective value (as :func:`replayed_objective`) of a replay that is feasible."""
    assert result.metrics is not None
    if objective == "makespan":
        return result.metrics.makespan
    if objective == "completion":
        return math.fsum(o.finish for o in result.outcomes.values())  # type: ignore[misc]
    if objective == "ttft":
        return result.metrics.mean_ttft
    raise ValueError(f"unknown objective {objective!r} (known: {', '.join(OBJECTIVES)})")


def check_agreement(solver_value: float, replayed_value: float, what: str, rtol: float = 1e-6) -> None:
    """Raise when a solver's own objective and the replayed one differ beyond ``rtol``."""
    if abs(solver_value - replayed_value) > rtol * max(1.0, abs(replayed_value)):
        raise RuntimeError(
            f"{what}: solver objective {solver_value!r} disagrees with the replayed {replayed_value!r}"
        )
