"""``SOLVERS["gmax"]``: maximise G = n / t over static batch schedules (SLO-aware paper, seed 000).

Options (``optsched solve INSTANCE --problem gmax ...``):

- ``method``: ``"exact"`` (default; :mod:`.exact`) or ``"sa"`` (the paper's annealing, :mod:`.sa`);
- ``exact_method``: ``"bnb"`` (default unless a ``solver`` is named: branch-and-bound with a
  Lagrangian bound, :mod:`.lagrange`, no MILP), ``"dinkelbach"`` (default when a ``solver`` is
  named) or ``"fixed-n"``; ``frontier`` (bool): also return the (n, t) Pareto frontier;
- ``solver`` (the slot MILP's backend, for ``dinkelbach`` and ``fixed-n``): ``"highs"`` (default),
  ``"cbc"``, ``"gurobi"`` or ``"cpsat"``;
- ``time_limit``, ``threads``, ``log``; ``lengths``: ``"true"`` (default) or ``"predicted"``;
- ``seed``, ``t0``, ``t_thres``, ``iters``, ``tau``, ``energy_scale`` for the annealing.

The objective is the G of the returned batches as judged by :func:`~.problem.evaluate_g`, in
requests per second; the solver's own value must agree with it (:func:`check_agreement`). There is
no iteration-level schedule (``schedule`` is None); ``extra`` carries ``n``, ``t``, ``batches`` (the
ordered list of batches of request ids) and per-request e2e / TTFT / TPOT.
"""

from __future__ import annotations

import math
import time
from dataclasses import fields
from typing import Any

from ...instance import Instance, InstanceError
from ...result import SolveResult, Status, check_agreement
from .exact import EXACT_METHODS, make_backend, solve_exact
from .problem import GmaxProblem, evaluate_g, g_value
from .sa import SAParams, simulated_annealing

__all__ = ["solve"]

#: The annealing options: :class:`SAParams`'s fields, by name and declared type.
_SA_TYPES = {f.name: f.type for f in fields(SAParams)}


def _sa_value(key: str, value: Any) -> int | float:
    """An annealing option as :class:`SAParams` types it (``int`` fields: integers; the rest:
    finite numbers), else bad input naming it."""
    integer = _SA_TYPES[key] in (int, "int")
    ok = not isinstance(value, bool) and (isinstance(value, int) if integer else isinstance(value, (int, float)))
    if not ok or not math.isfinite(value):
        raise InstanceError(f"option {key!r}: must be {'an integer' if integer else 'a finite number'}, got {value!r}")
    return value


def solve(instance: Instance, options: dict[str, Any]) -> SolveResult:
    """Solve the G-maximisation of a static-batching instance (see the module docstring)."""
    start = time.perf_counter()
    problem = GmaxProblem.from_instance(instance, lengths=options.get("lengths") or "true")
    method = options.get("method") or "exact"
    if method == "sa":
        params = SAParams(**{k: _sa_value(k, options[k]) for k in _SA_TYPES if options.get(k) is not None})
        sa = simulated_annealing(problem, params)
        batches, own, status, bound, solver = sa.batches, sa.G, Status.FEASIBLE, None, "sa"
        extra: dict[str, Any] = {"evaluations": sa.evaluations, "early_exit": sa.early_exit}
    elif method == "exact":
        solver = options.get("solver") or "highs"
        try:
            backend = make_backend(problem, solver, threads=options.get("threads"), log=bool(options.get("log")))
        except ValueError as exc:
            raise InstanceError(f"option 'solver': {exc}") from None
        exact_method = options.get("exact_method") or ("dinkelbach" if options.get("solver") else "bnb")
        if exact_method not in EXACT_METHODS:
            raise InstanceError(f"option 'exact_method': unknown {exact_method!r} (known: {', '.join(EXACT_METHODS)})")
        res = solve_exact(
            problem,
            backend,
            method=exact_method,
            time_limit=options.get("time_limit"),
            frontier=bool(options.get("frontier")),
        )
        batches, own, status, bound = res.batches, g_value(res.n, res.t), res.status, res.bound
        solver = "bnb" if exact_method == "bnb" else solver
        extra = {
            "exact_method": exact_method,
            "subproblems": res.iterations,
            "frontier": [{"n": n0, "t": t, "proven": ok} for n0, t, ok in res.frontier],
        }
    else:
        raise InstanceError(f"option 'method': must be 'exact' or 'sa', got {method!r}")
    judged = evaluate_g(problem, batches)
    check_agreement(own, judged.G, "gmax")
    extra.update({k: v for k, v in judged.to_dict().items() if k != "batches"})
    if options.get("lengths") == "predicted":
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
