"""``SOLVERS["gmax"]``: maximise G = n / t over static batch schedules (SLO-aware paper, seed 000).

Options: :class:`GmaxOptions`.

The objective is the G of the returned batches as judged by :func:`~.problem.evaluate_g`, in
requests per second; the solver's own value must agree with it (:func:`check_agreement`). There is
no iteration-level schedule (``schedule`` is None); ``extra`` carries ``n``, ``t``, ``batches`` (the
ordered list of batches of request ids) and per-request e2e / TTFT / TPOT.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ...budget import TimeBudget
from ...instance import Instance
from ...options import AnyInt, FiniteFloat, Flag, Name, OptionError, Options, PositiveFloat, PositiveInt
from ...result import Bound, SolveResult, Status, check_agreement
from .. import BACKENDS
from .exact import EXACT_METHODS, make_backend, solve_exact
from .problem import GmaxProblem, evaluate_g, g_value
from .sa import SAParams, simulated_annealing
from .slots import SlotData

#: Imported by the command line before a solve's clock starts (its time limit counts them): the
#: exact methods' default slot backend (PuLP, HiGHS).
SOLVE_MODULES = ("optsched.problems.gmax.milp",)

__all__ = ["GmaxBoundOptions", "GmaxOptions", "bounds", "solve"]

#: The annealing's options: the fields of :class:`.sa.SAParams`.
SA_OPTIONS = ("t0", "t_thres", "iters", "tau", "energy_scale", "seed")
#: The exact methods' options.
EXACT_OPTIONS = ("exact_method", "frontier", "solver", "threads", "log")


@dataclass(frozen=True)
class GmaxOptions(Options):
    """Options of the gmax ``solve``.

    Attributes
    ----------
    method
        ``exact`` (:mod:`.exact`) or ``sa`` (the paper's annealing, :mod:`.sa`).
    exact_method
        ``bnb`` (branch and bound with a Lagrangian bound, :mod:`.lagrange`, no MILP; the default
        unless a ``solver`` is named), ``dinkelbach`` (the default when a ``solver`` is named) or
        ``fixed-n``.
    frontier
        Also return the (n, t) Pareto frontier.
    solver
        The slot model's backend (``dinkelbach``, ``fixed-n``, and the frontier): ``highs``,
        ``cbc``, ``gurobi`` or ``cpsat``.
    time_limit
        Wall-clock limit of either method: the exact methods return their best schedule and
        bound, the annealing its best schedule (status ``time_limit``) when it passes.
    threads, log
        The backend's threads and log.
    lengths
        ``true`` or ``predicted`` output lengths.
    t0, t_thres, iters, tau, energy_scale, seed
        The annealing's parameters (:class:`.sa.SAParams`).
    """

    problem = "gmax"
    method: Literal["exact", "sa"] = "exact"
    exact_method: Literal[EXACT_METHODS] | None = None
    frontier: Flag = False
    solver: Name | None = None
    time_limit: PositiveFloat | None = None
    threads: PositiveInt | None = None
    log: Flag = False
    lengths: Literal["true", "predicted"] = "true"
    t0: FiniteFloat | None = None
    t_thres: FiniteFloat | None = None
    iters: AnyInt | None = None
    tau: FiniteFloat | None = None
    energy_scale: FiniteFloat | None = None
    seed: AnyInt | None = None

    def check(self) -> None:
        if self.solver is not None and self.solver not in BACKENDS["gmax"]:
            raise OptionError(
                f"option 'solver': problem 'gmax' has no backend {self.solver!r} (known: {', '.join(BACKENDS['gmax'])})"
            )
        for option in SA_OPTIONS:
            self.only_with(option, self.method == "sa", "method is 'sa'")
        for option in EXACT_OPTIONS:
            self.only_with(option, self.method == "exact", "method is 'exact'")
        slot_model = self.resolved_exact_method() != "bnb" or self.frontier
        for option in ("solver", "threads", "log"):
            self.only_with(
                option,
                self.method == "sa" or slot_model,
                "the slot model runs (exact_method 'dinkelbach' or 'fixed-n', or frontier)",
            )

    def resolved_exact_method(self) -> str:
        """``exact_method``, or its default: ``dinkelbach`` when a solver is named, else ``bnb``."""
        return self.exact_method or ("dinkelbach" if self.solver is not None else "bnb")

    def sa_params(self) -> SAParams:
        """The annealing's parameters, the paper's defaults where not given."""
        return SAParams(**{k: getattr(self, k) for k in SA_OPTIONS if getattr(self, k) is not None})


def solve(instance: Instance, options: Mapping[str, Any] | GmaxOptions | None, budget: TimeBudget) -> SolveResult:
    """Solve the G-maximisation of a static-batching instance (see the module docstring) within
    ``budget`` (:func:`optsched.api.solve` makes it)."""
    opts = GmaxOptions.parse(options)
    start = time.perf_counter()
    problem = GmaxProblem.from_instance(instance, lengths=opts.lengths)
    if opts.method == "sa":
        sa = simulated_annealing(problem, opts.sa_params(), budget)
        status = Status.TIME_LIMIT if sa.timed_out else Status.FEASIBLE
        batches, own, bound, solver = sa.batches, sa.G, None, "sa"
        extra: dict[str, Any] = {"evaluations": sa.evaluations, "early_exit": sa.early_exit}
    else:
        solver = opts.solver or "highs"
        backend = make_backend(problem, solver, threads=opts.threads, log=opts.log)
        exact_method = opts.resolved_exact_method()
        res = solve_exact(problem, backend, method=exact_method, budget=budget, frontier=opts.frontier)
        batches, own, status, bound = res.batches, g_value(res.n, res.t), res.status, res.bound
        solver = "bnb" if exact_method == "bnb" else solver
        extra = {
            "exact_method": exact_method,
            "subproblems": res.iterations,
            "frontier": [{"n": n0, "t": t, "proven": ok} for n0, t, ok in res.frontier],
        }
    judged = evaluate_g(problem, batches)
    check_agreement(own, judged.G, "gmax")
    extra.update({k: v for k, v in judged.to_dict().items() if k != "batches"})
    if opts.lengths == "predicted":
        extra["G_true"] = evaluate_g(GmaxProblem.from_instance(instance, "true"), batches).G
    return SolveResult(
        problem="gmax",
        solver=solver,
        status=status,
        objective=judged.G,
        bound=bound,
        wall_time=time.perf_counter() - start,
        schedule=None,
        sense="max",
        batches=[list(b) for b in judged.batches],
        extra=extra,
    )


@dataclass(frozen=True)
class GmaxBoundOptions(Options):
    """Options of the gmax ``bounds``: ``lengths``, ``true`` or ``predicted`` output lengths, and
    ``time_limit``, honoured by a bound computed in milliseconds (a command's limit bounds its
    process, :mod:`optsched.exiting`)."""

    problem = "gmax"
    what = "bound"
    lengths: Literal["true", "predicted"] = "true"
    time_limit: PositiveFloat | None = None


def bounds(instance: Instance, options: Mapping[str, Any] | GmaxBoundOptions | None, budget: TimeBudget) -> list[Bound]:
    """``BOUNDERS["gmax"]``: an upper bound on G (G is maximised), proven without a solver (it takes
    none of ``budget``).

    ``n`` is at most the number of requests that can meet their SLO in some batch, and ``t`` at least
    :meth:`.slots.SlotData.t_lower_bound` (every request's shortest execution plus the earliest
    start of each execution position), so ``G = n / t <= n_max / t_LB`` (the same bound caps the
    exact methods' reported bound).
    """
    opts = GmaxBoundOptions.parse(options)
    data = SlotData.build(GmaxProblem.from_instance(instance, lengths=opts.lengths))
    n_max = int(data.can_meet.any(axis=1).sum())
    t_lb = data.t_lower_bound()
    value = n_max / t_lb if t_lb > 0 else float("inf")
    return [
        Bound(
            "slo-requests-over-least-time",
            value,
            True,
            f"G <= {n_max} requests that can meet their SLO / t >= {t_lb:.6g} s (upper bound)",
        )
    ]
