"""One thin adapter from optsched's MIP backend names to PuLP solver objects.

Every formulation that solves a PuLP model gets its solver here, so that the backends' quirks are
handled once:

- ``highs`` (PuLP's in-process HiGHS, highspy 1.14): the thread count is **never** passed. HiGHS
  keeps one process-wide thread pool, sized by the first solve; a later solve asking for another
  count is refused and returns "Not Solved" (seen when two formulations ran in one process). HiGHS
  therefore uses its default pool and ``threads`` is ignored for it.
- ``cbc`` (PuLP's bundled CBC): time limits count wall-clock seconds (``timeMode="elapsed"``), as
  for the other backends.
- ``gurobi`` (gurobipy, possibly under the size-limited restricted licence): the absolute gap is
  Gurobi's ``MIPGapAbs`` and the thread count its ``Threads`` parameter.

HiGHS's MIP presolve can return a point that violates a row of the original model and then call a
feasible model infeasible (HiGHS 1.14 on an InferMax model with ``max_running`` 1; the class of
fault of ERGO-Code/HiGHS issues 2204 and 3296). :func:`solve_model` solves again without presolve
when a model with a known solution (a warm start, or one true by construction) is called infeasible.

Handing a built model over to the solver is not free: PuLP passes it row by row (HiGHS) or writes
a file (CBC) before the solver's own clock starts. :func:`solver_budget` leaves time for it.

The solver's time limit is read from a :class:`~optsched.budget.TimeBudget` in one place,
:func:`pulp_solver` (and again by :func:`solve_model` for a second solve).
"""

from __future__ import annotations

from typing import Any

import pulp

from .budget import TimeBudget
from .interrupt import stoppable

__all__ = [
    "HANDOVER_PER_BUILD",
    "MIP_BACKENDS",
    "HighsWithStart",
    "licence_refused",
    "pulp_solver",
    "solve_model",
    "solver_budget",
]

#: The shortest time limit given to a MIP solver, in seconds.
LEAST_SECONDS = 0.01

MIP_BACKENDS = ("highs", "cbc", "gurobi")

#: Handing a PuLP model to the solver (PuLP's transfer and the solver's start) takes 0.9 to 1.8
#: times its build (HiGHS; the hybrid MIP on 10 to 40 GSM8K-like requests 1.65-1.76, the InferMax
#: MIP at N = 4 to 16 0.94-1.56).
HANDOVER_PER_BUILD = 2.0


def solver_budget(budget: TimeBudget, build_seconds: float) -> TimeBudget:
    """The budget to give the solver of a model built in ``build_seconds`` so that the whole call
    ends within ``budget``: :data:`HANDOVER_PER_BUILD` build times less. A solver whose budget has
    expired should not be started."""
    return budget.reserve(HANDOVER_PER_BUILD * build_seconds)


class HighsWithStart(pulp.HiGHS):
    """PuLP's HiGHS plus a MIP start (the variables' initial values, when ``warm_start`` and every
    one is set) and a stop on a command's Ctrl-C (:mod:`optsched.interrupt`: HiGHS's own
    ``cancelSolve``, then it returns its best solution so far).

    PuLP adds HiGHS columns in ``lp.variables()`` order, so the values are passed in that order.
    """

    def __init__(self, *args: Any, warm_start: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.warm_start = warm_start

    def callSolver(self, lp: pulp.LpProblem) -> None:
        values = [var.varValue for var in lp.variables()]
        if self.warm_start and values and all(v is not None for v in values):
            import highspy

            start = highspy.HighsSolution()
            start.col_value = [float(v) for v in values]
            start.value_valid = True
            lp.solverModel.setSolution(start)
        with stoppable(lp.solverModel.cancelSolve) as active:
            if active:  # HiGHS checks for the stop in its interrupt callbacks, only when asked to
                lp.solverModel.HandleUserInterrupt = True
            lp.solverModel.run()


def pulp_solver(
    backend: str,
    *,
    budget: TimeBudget | None = None,
    threads: int | None = None,
    msg: bool = False,
    gap_rel: float | None = None,
    gap_abs: float | None = None,
    mip: bool = True,
    warm_start: bool = False,
    **options: Any,
) -> pulp.LpSolver:
    """A PuLP solver for ``backend`` in :data:`MIP_BACKENDS`.

    Parameters
    ----------
    backend
        ``highs``, ``cbc`` or ``gurobi``.
    budget
        The solver's time (its time left when the solver is made, at least :data:`LEAST_SECONDS`;
        None: no limit).
    threads
        Threads for CBC and Gurobi (ignored by HiGHS, see the module docstring).
    msg
        Let the solver print its log.
    gap_rel, gap_abs
        Relative and absolute optimality gaps (None: the solver's default).
    mip
        False solves the LP relaxation.
    warm_start
        Start from the variables' initial values (``setInitialValue``); for HiGHS only when every
        variable has one (:class:`HighsWithStart`).
    options
        Further backend-specific keyword arguments, passed through.

    Raises
    ------
    ValueError
        For an unknown backend.
    """
    time_limit = None if budget is None else budget.left(LEAST_SECONDS)
    common: dict[str, Any] = {"msg": msg, "timeLimit": time_limit, "mip": mip, "gapRel": gap_rel}
    if backend == "highs":
        return HighsWithStart(**common, gapAbs=gap_abs, warm_start=warm_start, **options)
    if backend == "cbc":
        return pulp.PULP_CBC_CMD(
            **common, gapAbs=gap_abs, threads=threads, warmStart=warm_start, timeMode="elapsed", **options
        )
    if backend == "gurobi":
        if threads:
            options["Threads"] = threads
        if gap_abs is not None:
            options["MIPGapAbs"] = gap_abs
        return pulp.GUROBI(**common, warmStart=warm_start, **options)
    raise ValueError(f"unknown MIP backend {backend!r} (known: {', '.join(MIP_BACKENDS)})")


#: The note :func:`solve_model` returns when it solved again without presolve.
PRESOLVE_OFF_NOTE = "HiGHS called a model with a known solution infeasible; solved again without presolve"


def solve_model(
    prob: pulp.LpProblem, solver: pulp.LpSolver, *, known_feasible: bool, budget: TimeBudget | None = None
) -> tuple[int, str | None]:
    """``prob.solve(solver)``, solved again with HiGHS's presolve off when HiGHS calls the model
    infeasible although ``known_feasible`` (see the module docstring).

    Parameters
    ----------
    known_feasible
        The model has a solution (a warm start that is a point of it, or one by construction): an
        "infeasible" answer is then the solver's fault.
    budget
        The time of both solves (the second's limit: what is left of it; None: the first solve's
        limit).

    Returns
    -------
    (status, note)
        PuLP's status code of the last solve; ``note`` is :data:`PRESOLVE_OFF_NOTE` when the model
        was solved again, else None.
    """
    code = prob.solve(solver)
    if not (known_feasible and code == pulp.LpStatusInfeasible and isinstance(solver, pulp.HiGHS)):
        return code, None
    if solver.optionsDict.get("presolve") == "off":
        return code, None
    solver.optionsDict["presolve"] = "off"
    if budget is not None and budget.limited:
        solver.timeLimit = budget.left(LEAST_SECONDS)
    return prob.solve(solver), PRESOLVE_OFF_NOTE


def licence_refused(exc: BaseException) -> bool:
    """Whether ``exc`` is a solver refusing a model its licence does not cover (gurobipy's
    ``GurobiError: Model too large for size-limited license``): the answer is ``unsupported``, not
    a crash."""
    text = str(exc).lower()
    return "size-limited" in text or "licen" in text
