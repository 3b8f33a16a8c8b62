"""Exact and heuristic G-maximisation for static batches (SLO-aware scheduling, seed 000).

Modules: :mod:`.problem` (instance extension and ``calculateG``), :mod:`.slots` (the exact model),
:mod:`.milp` and :mod:`.cpsat` (its backends), :mod:`.exact` (Dinkelbach and fixed-n),
:mod:`.sa` (the paper's simulated annealing and instance assignment), :mod:`.solve` (the
``gmax`` entry of the solver registry).
"""

from .problem import GEvaluation, GmaxProblem, evaluate_g

__all__ = ["GEvaluation", "GmaxProblem", "evaluate_g"]
