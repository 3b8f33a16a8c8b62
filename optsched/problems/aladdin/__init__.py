"""Aladdin (seed002): SLO-aware request placement as bin packing, minimum GPUs, multi-worker simulation.

Modules: :mod:`.models` (Eqs. 1-4), :mod:`.workerconfig` (Eqs. 5, 6), :mod:`.placement` (the MIP
(a)-(h) with CP-SAT and PuLP backends), :mod:`.heuristics` (Algs. 1, 2 and baselines),
:mod:`.predictor` (output-length prediction), :mod:`.cluster` (multi-worker simulator),
:mod:`.capacity` (minimum GPUs), :mod:`.solve` (the ``SOLVERS["aladdin"]`` entry point).
"""

from typing import Any

__all__ = ["bounds", "solve"]


def __getattr__(name: str) -> Any:
    """Import the solver entry points lazily (the registry names ``optsched.problems.aladdin:solve``)."""
    if name in __all__:
        from . import solve as _solve_module

        return getattr(_solve_module, name)
    raise AttributeError(name)
