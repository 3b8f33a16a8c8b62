"""Aladdin (seed002): SLO-aware request placement as bin packing, minimum GPUs, multi-worker simulation.

Modules: :mod:`.models` (Eqs. 1-4), :mod:`.placement` (the MIP (a)-(h): its data and checks),
:mod:`.exact` (its CP-SAT and PuLP backends), :mod:`.heuristics` (Algs. 1, 2 and baselines),
:mod:`.predictor` (output-length prediction), :mod:`.cluster` (multi-worker simulator),
:mod:`.capacity` (minimum GPUs), :mod:`.solve` (the ``SOLVERS["aladdin"]`` and
``BOUNDERS["aladdin"]`` entry points). Eqs. 5 and 6 (the worker configuration of Table 3) are test
and benchmark code: ``tests/support/aladdin_workers.py``.
"""

from .solve import AladdinBoundOptions, AladdinOptions, bounds, solve

__all__ = ["AladdinBoundOptions", "AladdinOptions", "bounds", "solve"]
