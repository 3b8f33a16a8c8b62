"""Registry of the formulations ``optsched solve`` and ``optsched bound`` dispatch to.

Each entry maps a problem name to ``"module:function"``; the module is imported only when used, so
that the CLI starts fast and one formulation's dependencies never load for another.

- a *solver* has the signature ``solve(instance, options: dict) -> SolveResult``;
- a *bounder* has the signature ``bounds(instance, options: dict) -> list[Bound]``.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any, Callable

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


def _resolve(table: dict[str, str], name: str, kind: str) -> Callable[..., Any]:
    try:
        target = table[name]
    except KeyError:
        raise KeyError(f"unknown problem {name!r} for {kind} (known: {', '.join(sorted(table)) or 'none registered'})") from None
    module, _, attr = target.partition(":")
    return getattr(import_module(module), attr)


def solver_for(name: str) -> Callable[..., Any]:
    """The solve function registered for problem ``name``."""
    return _resolve(SOLVERS, name, "solve")


def bounder_for(name: str) -> Callable[..., Any]:
    """The bounds function registered for problem ``name``."""
    return _resolve(BOUNDERS, name, "bound")
