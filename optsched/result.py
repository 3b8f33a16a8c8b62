"""Backend-neutral results shared by every formulation: :class:`Status`, :class:`SolveResult`, :class:`Bound`.

A formulation's ``solve`` returns a :class:`SolveResult`. When it produces an iteration-level
schedule, :func:`replayed_objective` recomputes its objective with :func:`optsched.schedule.replay`;
the reported objective is that replayed value, and :func:`check_agreement` rejects a solver whose own
value disagrees with it (a modelling bug, never silently reported).

Every result that has a status spells it with :class:`Status`. The other result classes of the
package are steps inside a formulation, not answers to a problem, so they are not
:class:`SolveResult`: each carries what its step produces for the next one, in that step's own
terms (no replayed schedule, often no objective of the problem):

- a backend's raw solution before it becomes a schedule (``infermax.cpsat.BackendResult``: token
  counts per request and batch), or a sub-model's (``gmax.slots.SubResult``, one slot MILP solve;
  ``gmax.lagrange.BnbResult``, ``gmax.exact.ExactResult`` and ``gmax.sa.SAResult``: batches with
  their own n and t, judged afterwards by ``evaluate_g``);
- a bound with its certificate (``infermax.relax.RelaxationResult``, ``CountResult``,
  ``infermax.chunks.ChunkBound``);
- a decision for one heartbeat or one stage (``aladdin.placement.PlacementResult``: request ->
  worker; ``hybrid.pcmax.Assignment``: request -> client; ``scls.offload.Offload``: batch ->
  worker);
- a simulation or a capacity search (``aladdin.cluster.ClusterResult``, ``aladdin.capacity.
  CapacityResult``), and the judge itself (``schedule.ReplayResult``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

from .instance import Instance
from .schedule import ReplayResult, Schedule, replay

__all__ = [
    "OBJECTIVES",
    "OPTIMAL_RTOL",
    "OBJECTIVE_ALIASES",
    "OBJECTIVE_NAMES",
    "OBJECTIVE_TABLE",
    "Bound",
    "Objective",
    "SolveResult",
    "Status",
    "check_agreement",
    "default_objective",
    "objective_named",
    "objective_of",
    "relative_gap",
    "replayed_objective",
]


class Status(StrEnum):
    """How a solve, or one step of it, ended (the value is the JSON spelling).

    ``OPTIMAL``: proven optimal; ``FEASIBLE``: a solution without proof of optimality;
    ``INFEASIBLE``: proven to have no solution (the answer is "no"); ``TIME_LIMIT``: stopped by the
    time limit, with the best solution found (if any) and the proven bound; ``UNSUPPORTED``: the
    formulation does not accept this instance; ``ERROR``: it failed; ``UNKNOWN``: a step (a backend,
    a sub-model) ended with neither a solution nor a proof, e.g. a model not built; never the
    status of a :class:`SolveResult`.
    """

    OPTIMAL = "optimal"
    FEASIBLE = "feasible"
    INFEASIBLE = "infeasible"
    TIME_LIMIT = "time_limit"
    UNSUPPORTED = "unsupported"
    ERROR = "error"
    UNKNOWN = "unknown"


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


@dataclass(kw_only=True)
class SolveResult:
    """What a formulation's ``solve`` returns and ``optsched solve`` reports (docs/cli.md).

    Attributes
    ----------
    problem, solver
        The formulation and the backend or method that produced the answer.
    status
        How the solve ended.
    objective
        The answer's objective (replayed when there is a schedule); None without an answer.
    bound
        The best proven bound, in the objective's sense (a lower bound for ``sense="min"``).
    wall_time
        Seconds spent.
    schedule, replay
        The iteration-level schedule, when the formulation produces one, and its replay.
    sense
        ``"min"`` or ``"max"``.
    message
        Why the solve gave no answer, or what limits it (status ``unsupported``, ``infeasible``, or
        no answer in time); None when there is nothing to say.
    incumbent
        Where the reported schedule comes from when it is not the solver's own (a policy's or a
        heuristic's that was better, or the solver found none).
    batches
        The answer as static batches of request ids, for formulations without an iteration-level
        schedule (``gmax``, ``scls-batch``).
    extra
        The formulation's own details (docs of each problem), reported after the fields above.
    """

    problem: str
    solver: str
    status: Status
    objective: float | None = None
    bound: float | None = None
    wall_time: float = 0.0
    schedule: Schedule | None = None
    sense: Literal["min", "max"] = "min"
    message: str | None = None
    incumbent: str | None = None
    batches: list[list[str]] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    replay: ReplayResult | None = None

    def __post_init__(self) -> None:
        self.status = Status(self.status)

    @property
    def gap(self) -> float | None:
        """Relative gap |objective - bound| / |objective|; (bound - objective) / bound for ``sense="max"``
        (the share of the upper bound not reached); None when either is missing."""
        if self.sense == "max" and self.objective is not None and self.bound is not None:
            return (self.bound - self.objective) / max(abs(self.bound), 1e-12)
        return relative_gap(self.objective, self.bound)

    def to_dict(self, schedule_path: str | None = None) -> dict[str, Any]:
        """The JSON object of ``optsched solve`` (``schedule_path``: where the schedule was written)."""
        out = {
            "problem": self.problem,
            "solver": self.solver,
            "status": self.status.value,
            "objective": self.objective,
            "bound": self.bound,
            "gap": self.gap,
            "wall_time": self.wall_time,
            "schedule": schedule_path,
        }
        if self.replay is not None and self.replay.metrics is not None:
            out["metrics"] = self.replay.metrics.to_dict()
        for key in ("message", "incumbent", "batches"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        out.update(self.extra)
        return out


#: A schedule whose objective is within this relative distance of a proven bound is optimal.
OPTIMAL_RTOL = 1e-9


def relative_gap(objective: float | None, bound: float | None) -> float | None:
    """|objective - bound| / max(|objective|, tiny); None if either is None."""
    if objective is None or bound is None or not math.isfinite(objective) or not math.isfinite(bound):
        return None
    return abs(objective - bound) / max(abs(objective), 1e-12)


#: The value of ``goodput``: requests meeting every SLO they carry (:attr:`~optsched.metrics.RequestOutcome.meets_slo`).
SLO_MET = "slo_met"


@dataclass(frozen=True)
class Objective:
    """One objective a user can ask for: its name, unit, sense and value from a replay.

    Attributes
    ----------
    name
        The name on the command line and in the API (``--objective NAME``).
    unit
        The unit of its value, of every bound on it and of the numerator of every gap.
    sense
        ``min`` or ``max`` (``goodput``: its bounds are upper bounds, its gap (bound - value) / bound).
    what
        One line saying what it is.
    metric
        The field of :class:`optsched.metrics.Metrics` that holds its value (the replay's value), or
        :data:`SLO_MET`: the number of requests that meet every SLO they carry.
    """

    name: str
    unit: str
    sense: Literal["min", "max"]
    what: str
    metric: str

    def value(self, result: ReplayResult) -> float:
        """Its value on a feasible replay: the replay's metric (the one definition)."""
        assert result.metrics is not None
        if self.metric == SLO_MET:
            return float(sum(o.meets_slo for o in result.outcomes.values()))
        return float(getattr(result.metrics, self.metric))


#: The objectives, by name: one row each (a new objective is one more row).
OBJECTIVE_TABLE: dict[str, Objective] = {
    o.name: o
    for o in (
        Objective("makespan", "s", "min", "end of the last batch", "makespan"),
        Objective("latency", "s", "min", "mean end-to-end latency, sum_i (finish_i - arrival_i) / N", "mean_latency"),
        Objective("ttft", "s", "min", "mean time to first token, sum_i (first_token_i - arrival_i) / N", "mean_ttft"),
        Objective("goodput", "requests", "max", "requests meeting every SLO they carry (TTFT, TPOT)", SLO_MET),
    )
}

#: Other names accepted for an objective: ``completion`` (the sum of finish times minus the constant
#: sum of arrivals, over N, is the mean latency: the same optimisation) is read as ``latency``.
OBJECTIVE_ALIASES = {"completion": "latency"}

#: The objectives' names.
OBJECTIVES = tuple(OBJECTIVE_TABLE)

#: The objectives that are maximised (their bounds are upper bounds).
MAXIMISED = frozenset(o.name for o in OBJECTIVE_TABLE.values() if o.sense == "max")

#: Every name accepted where an objective is asked for (the objectives and their aliases).
OBJECTIVE_NAMES = (*OBJECTIVES, *OBJECTIVE_ALIASES)


def objective_named(name: str) -> Objective:
    """The objective called ``name`` (an alias gives its objective).

    Raises
    ------
    ValueError
        When no objective has that name.
    """
    found = OBJECTIVE_TABLE.get(OBJECTIVE_ALIASES.get(name, name))
    if found is None:
        raise ValueError(f"unknown objective {name!r} (known: {', '.join(OBJECTIVE_NAMES)})")
    return found


def default_objective(instance: Instance) -> str:
    """The objective a report compares when none is asked for: ``latency`` when the requests arrive
    at different times (the makespan is then set by the last arrival), else ``makespan`` (the
    InferMax paper's total latency of an offline batch)."""
    return "latency" if len({r.arrival for r in instance.requests}) > 1 else "makespan"


def replayed_objective(
    instance: Instance, schedule: Schedule, objective: str = "makespan"
) -> tuple[float, ReplayResult]:
    """Replay a schedule and return its objective value and the replay.

    Parameters
    ----------
    objective
        A name of :data:`OBJECTIVE_TABLE` (``makespan``, ``latency``, ``ttft``, ``goodput``) or an
        alias.

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
    return objective_named(objective).value(result)


def check_agreement(solver_value: float, replayed_value: float, what: str, rtol: float = 1e-6) -> None:
    """Raise when a solver's own objective and the replayed one differ beyond ``rtol``."""
    if abs(solver_value - replayed_value) > rtol * max(1.0, abs(replayed_value)):
        raise RuntimeError(f"{what}: solver objective {solver_value!r} disagrees with the replayed {replayed_value!r}")
