"""Registry of the formulations ``optsched solve`` and ``optsched bound`` dispatch to.

Each entry maps a problem name to ``"module:function"``; the module is imported only when used, so
that the CLI starts fast and one formulation's dependencies never load for another.

- a *solver* has the signature ``solve(instance, options: dict) -> SolveResult``;
- a *bounder* has the signature ``bounds(instance, options: dict) -> list[Bound]``.
"""

from __future__ import annotations

from typing import Any, Callable

from ..registry import resolve

SOLVERS: dict[str, str] = {
    "aladdin": "optsched.problems.aladdin:solve",
    "gmax": "optsched.problems.gmax.solve:solve",
    "hybrid": "optsched.problems.hybrid.model:solve",
    "hybrid-offline": "optsched.problems.hybrid.offline:solve",
    "infermax": "optsched.problems.infermax:solve",
    "scls-batch": "optsched.problems.scls.solve:solve",
}
BOUNDERS: dict[str, str] = {
    "aladdin": "optsched.problems.aladdin:bounds",
    "hybrid": "optsched.problems.hybrid.bounds:bounds",
    "infermax": "optsched.problems.infermax:bounds",
}


def solver_for(name: str) -> Callable[..., Any]:
    """The solve function registered for problem ``name``."""
    return resolve(SOLVERS, name, "problem")


def bounder_for(name: str) -> Callable[..., Any]:
    """The bounds function registered for problem ``name``."""
    return resolve(BOUNDERS, name, "problem")
