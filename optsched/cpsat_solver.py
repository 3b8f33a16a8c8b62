"""One adapter from optsched's CP-SAT models to OR-Tools' ``CpSolver``.

Every formulation that solves a CP-SAT model solves it through :func:`run_model`, so that the
solver is configured in one place:

- the time limit: what is left of the caller's :class:`~optsched.budget.TimeBudget` (at least
  :data:`LEAST_SECONDS`: CP-SAT reads 0 as "stop before the first solution" and a negative limit
  as an error);
- the number of workers, and optionally the list of subsolvers they run, in order;
- the log: CP-SAT's search log goes to standard error (standard output carries the CLI's JSON);
- a command's Ctrl-C (:func:`optsched.interrupt.run_cpsat`: CP-SAT stops and returns its best
  solution so far, as at its time limit);
- the status: CP-SAT's code becomes a :class:`optsched.result.Status` (``OPTIMAL``, ``FEASIBLE``,
  ``INFEASIBLE``, ``ERROR`` for an invalid model, ``UNKNOWN`` when it stopped with neither a
  solution nor a proof). A formulation that reports a solution found within its time limit as
  ``TIME_LIMIT`` maps ``FEASIBLE`` itself.

OR-Tools is imported when a model is solved, not with this module (its import takes 1-3 s of CPU).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .budget import TimeBudget
from .interrupt import run_cpsat
from .result import Status

__all__ = ["LEAST_SECONDS", "CpSatRun", "run_model"]

#: The shortest time limit given to CP-SAT, in seconds.
LEAST_SECONDS = 0.01


@dataclass(frozen=True)
class CpSatRun:
    """A finished CP-SAT solve.

    Attributes
    ----------
    solver
        The ``CpSolver``, for the values of the model's variables (``solver.Value``).
    code
        CP-SAT's own status code.
    status
        That code as a :class:`~optsched.result.Status` (module docstring).
    """

    solver: Any
    code: int
    status: Status

    @property
    def found(self) -> bool:
        """Whether CP-SAT found a solution (status ``OPTIMAL`` or ``FEASIBLE``)."""
        return self.status in (Status.OPTIMAL, Status.FEASIBLE)

    @property
    def name(self) -> str:
        """CP-SAT's name of its status (``"OPTIMAL"``, ``"FEASIBLE"``, ...)."""
        return str(self.solver.StatusName(self.code))

    @property
    def bound(self) -> float:
        """CP-SAT's best proven bound on the objective (in the model's integer units)."""
        return float(self.solver.BestObjectiveBound())

    @property
    def objective(self) -> float:
        """The objective of the solution found (in the model's integer units)."""
        return float(self.solver.ObjectiveValue())

    def value(self, var: Any) -> int:
        """The value of ``var`` in the solution found."""
        return int(self.solver.Value(var))


def cpsat_status(code: int) -> Status:
    """CP-SAT's status ``code`` as a :class:`~optsched.result.Status` (module docstring)."""
    from ortools.sat.python import cp_model

    statuses: dict[int, Status] = {
        int(cp_model.OPTIMAL): Status.OPTIMAL,
        int(cp_model.FEASIBLE): Status.FEASIBLE,
        int(cp_model.INFEASIBLE): Status.INFEASIBLE,
        int(cp_model.MODEL_INVALID): Status.ERROR,
    }
    return statuses.get(int(code), Status.UNKNOWN)


def run_model(
    model: Any,
    *,
    budget: TimeBudget | None = None,
    workers: int = 1,
    subsolvers: Sequence[str] = (),
    log: bool = False,
) -> CpSatRun:
    """Solve a CP-SAT ``model`` (a ``cp_model.CpModel``).

    Parameters
    ----------
    budget
        The solve's time (None: no limit); CP-SAT gets what is left of it, at least
        :data:`LEAST_SECONDS`.
    workers
        CP-SAT's ``num_workers``.
    subsolvers
        The subsolvers the workers run, in order (empty: CP-SAT's default portfolio).
    log
        Print CP-SAT's search log on standard error.
    """
    from ortools.sat.python import cp_model

    solver = cp_model.CpSolver()
    time_limit = None if budget is None else budget.left(LEAST_SECONDS)
    if time_limit is not None:
        solver.parameters.max_time_in_seconds = time_limit
    solver.parameters.num_workers = workers
    if subsolvers:
        solver.parameters.subsolvers.extend(subsolvers)
    solver.parameters.log_search_progress = log
    if log:
        solver.parameters.log_to_stdout = False
        solver.log_callback = lambda line: print(line, file=sys.stderr)
    code = run_cpsat(solver, model)
    return CpSatRun(solver=solver, code=code, status=cpsat_status(code))
