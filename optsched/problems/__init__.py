"""Registry of the formulations ``optsched solve`` and ``optsched bound`` dispatch to.

Each entry maps a problem name to ``"module:function"``; the module is imported only when used, so
that the CLI starts fast and one formulation's dependencies never load for another. Every problem
has the same shape: a ``solve``, a ``bounds`` and their options dataclasses (the tables below name
the modules).

- a *solver* has the signature ``solve(instance, options) -> SolveResult``;
- a *bounder* has the signature ``bounds(instance, options) -> list[Bound]``;

``options`` being a mapping or an instance of the formulation's options dataclass
(:data:`SOLVE_OPTIONS`, :data:`BOUND_OPTIONS`: an :class:`optsched.options.Options` each), which
rejects an unknown option, a value of the wrong type and an option without effect
(:class:`optsched.options.OptionError`).

:data:`BACKENDS` lists the ``solver`` names each formulation accepts; :func:`check_backend` is the
one test of a name against it (the CLI calls it before any work, so an unusable name is bad input,
exit 2, not an internal error or a silently ignored option).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..registry import resolve

SOLVERS: dict[str, str] = {
    "aladdin": "optsched.problems.aladdin:solve",
    "gmax": "optsched.problems.gmax.solve:solve",
    "hybrid": "optsched.problems.hybrid.solve:solve",
    "hybrid-offline": "optsched.problems.hybrid.offline_solve:solve",
    "infermax": "optsched.problems.infermax:solve",
    "scls-batch": "optsched.problems.scls.solve:solve",
}
BOUNDERS: dict[str, str] = {
    "aladdin": "optsched.problems.aladdin:bounds",
    "gmax": "optsched.problems.gmax.solve:bounds",
    "hybrid": "optsched.problems.hybrid.bounds:bounds",
    "hybrid-offline": "optsched.problems.hybrid.offline_solve:bounds",
    "infermax": "optsched.problems.infermax:bounds",
    "scls-batch": "optsched.problems.scls.solve:bounds",
}
#: The options dataclass of each solver.
SOLVE_OPTIONS: dict[str, str] = {
    "aladdin": "optsched.problems.aladdin.offline:AladdinOptions",
    "gmax": "optsched.problems.gmax.solve:GmaxOptions",
    "hybrid": "optsched.problems.hybrid.solve:HybridOptions",
    "hybrid-offline": "optsched.problems.hybrid.offline_solve:HybridOfflineOptions",
    "infermax": "optsched.problems.infermax.model:InferMaxOptions",
    "scls-batch": "optsched.problems.scls.solve:SclsOptions",
}
#: The options dataclass of each bounder.
BOUND_OPTIONS: dict[str, str] = {
    "aladdin": "optsched.problems.aladdin.offline:AladdinBoundOptions",
    "gmax": "optsched.problems.gmax.solve:GmaxBoundOptions",
    "hybrid": "optsched.problems.hybrid.bounds:HybridBoundOptions",
    "hybrid-offline": "optsched.problems.hybrid.offline_solve:HybridOfflineBoundOptions",
    "infermax": "optsched.problems.infermax.model:InferMaxBoundOptions",
    "scls-batch": "optsched.problems.scls.solve:SclsBoundOptions",
}
#: Problems whose answer is not an iteration-level schedule: a placement (``aladdin``) or static
#: batches (``gmax``, ``scls-batch``), reported in the result's JSON.
NO_SCHEDULE: frozenset[str] = frozenset({"aladdin", "gmax", "scls-batch"})

#: ``solver`` names each formulation accepts (its default first). ``hybrid-offline`` and
#: ``scls-batch`` use a MIP backend only for ``method=mip``; ``hybrid-offline``'s exact stage is
#: CP-SAT otherwise. The one table: infermax and aladdin read their lists from it; the MIP
#: backends are those of :data:`optsched.mipsolvers.MIP_BACKENDS` (not imported here: it loads PuLP).
BACKENDS: dict[str, tuple[str, ...]] = {
    "aladdin": ("cpsat", "highs", "cbc", "gurobi"),
    "gmax": ("highs", "cbc", "gurobi", "cpsat"),
    "hybrid": ("highs", "cbc", "gurobi"),
    "hybrid-offline": ("cpsat", "highs", "cbc", "gurobi"),
    "infermax": ("cpsat", "highs", "cbc", "gurobi"),
    "scls-batch": ("highs", "cbc", "gurobi"),
}


def check_backend(problem: str, solver: str | None) -> None:
    """Raise ``ValueError`` naming the accepted backends when ``solver`` is not one of ``problem``'s.

    ``None`` (the formulation's default) and problems without a :data:`BACKENDS` entry pass.
    """
    known = BACKENDS.get(problem)
    if solver is None or known is None or solver in known:
        return
    raise ValueError(f"problem {problem!r} has no backend {solver!r} (known: {', '.join(known)})")


def solver_for(name: str) -> Callable[..., Any]:
    """The solve function registered for problem ``name``."""
    return resolve(SOLVERS, name, "problem")


def bounder_for(name: str) -> Callable[..., Any]:
    """The bounds function registered for problem ``name``."""
    return resolve(BOUNDERS, name, "problem")


def options_for(name: str, kind: str = "solve") -> Any:
    """The options dataclass of problem ``name``'s solver (``kind="solve"``) or bounder (``"bound"``);
    None for a problem registered without one (it reads its options itself)."""
    table = SOLVE_OPTIONS if kind == "solve" else BOUND_OPTIONS
    return resolve(table, name, "problem") if name in table else None


def accepted(name: str, kind: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of ``options`` that problem ``name``'s solver or bounder has.

    For callers that run several formulations with shared settings (``report``, ``sweep``: the
    objective, the time limit), where a formulation without such an option simply does not take it.
    """
    cls = options_for(name, kind)
    if cls is None:
        return dict(options)
    names = cls.names()
    return {k: v for k, v in options.items() if k in names}
