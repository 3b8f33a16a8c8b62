"""InferMax optimal scheduler (seed001 section 3.3).

The solve entry and the bounds of the registry are in :mod:`.solve` (its docstring lists the
solve's phases); the model is stated in :mod:`.model`, its backends are :mod:`.cpsat` (OR-Tools
CP-SAT) and :mod:`.mip` (PuLP to HiGHS / CBC, gurobipy).
"""

from .candidates import Candidate, CandidatePool, candidate_schedules
from .model import InferMaxBoundOptions, InferMaxOptions

__all__ = ["Candidate", "CandidatePool", "InferMaxBoundOptions", "InferMaxOptions", "candidate_schedules"]
