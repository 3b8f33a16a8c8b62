"""Registry of the formulations ``optsched solve`` and ``optsched bound`` dispatch to.

Each entry maps a problem name to ``"module:function"``; the module is imported only when used, so
that the CLI starts fast and one formulation's dependencies never load for another.

- a *solver* has the signature ``solve(instance, options: dict) -> SolveResult``;
- a *bounder* has the signature ``bounds(instance, options: dict) -> list[Bound]``.

:data:`BACKENDS` lists the ``solver`` names each formulation accepts; :func:`check_backend` is the
one test of a name against it (the CLI calls it before any work, so an unusable name is bad input,
exit 2, not an internal error or a silently ignored option).
"""

from __future__ import annotations

from typing import Any, Callable

from ..registry import resolve

SOLVERS: dict[str, str] = {
    "aladdin": "optsched.problems.aladdin:solve",
    "gmax": "optsched.problems.gmax.solve:solve",
    "hybrid": "optsched.problems.hybrid.model:solve",
    "hybrid-offline": "optsched.problems.hybrid.offline_solve:solve",
    "infermax": "optsched.problems.infermax:solve",
    "scls-batch": "optsched.problems.scls.solve:solve",
}
BOUNDERS: dict[str, str] = {
    "aladdin": "optsched.problems.aladdin:bounds",
    "hybrid": "optsched.problems.hybrid.bounds:bounds",
    "infermax": "optsched.problems.infermax:bounds",
}

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
