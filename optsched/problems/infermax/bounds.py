"""Proven lower bounds for InferMax (registry entry ``BOUNDERS['infermax']``).

The model (:mod:`.model`) computes its objectives exactly as :func:`optsched.schedule.replay` does,
so every bound of :mod:`optsched.bounds` (proven for every schedule that replays cleanly, with or
without evictions, chunking or hybrid batches) holds for its optimum: for ``makespan`` the work
bound with the Martello-Toth packing count and the count program of batch overheads, refills and
chunking, and the critical path; for ``completion`` the sum of critical paths; for ``ttft`` the mean
prefill-alone time. The solvers' own proven bounds (:func:`.solve`) are usually much tighter on
small instances.
"""

from __future__ import annotations

from typing import Any, Mapping

from ...bounds import generic_bounds
from ...instance import Instance
from ...result import Bound

__all__ = ["bounds"]


def bounds(instance: Instance, options: Mapping[str, Any]) -> list[Bound]:
    """Proven lower bounds for ``options['objective']`` (default makespan).

    With ``method='lp'`` the LP relaxation of the MIP (:mod:`.mip`) is added (proven, usually weaker
    than the work bound on large instances but independent of it).
    """
    out = generic_bounds(instance, options.get("objective") or "makespan")
    if options.get("method") == "lp":
        from .mip import lp_relaxation_bound

        out.append(lp_relaxation_bound(instance, dict(options)))
    return out
