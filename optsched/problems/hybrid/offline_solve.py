"""``SOLVERS["hybrid-offline"]``: the offline assignment of the Hybrid paper (Eqs. 26-30) and its schedule.

The assignment of requests to the ``J`` clients is the P||Cmax optimum of :mod:`.offline` on decode
rounds; the objective is the largest client load in seconds, ``tau_d * C*``. The schedule reported
with it is the ``hybrid-offline`` policy of :mod:`.online` run on that assignment (prefill-first, no
queue sorting or stealing), replayed by :func:`optsched.schedule.replay`.
"""

from __future__ import annotations

import time
from typing import Any

from ...instance import Instance, InstanceError
from ...mipsolvers import MIP_BACKENDS
from ...result import SolveResult
from ...schedule import replay
from .offline import LENGTHS, PCMAX_METHODS, loads_of, processing_times, solve_pcmax
from .online import simulate_pd
from .timing import timing_of

__all__ = ["solve"]


def solve(instance: Instance, options: dict[str, Any]) -> SolveResult:
    """``SOLVERS["hybrid-offline"]``: the optimal max client load in seconds, ``tau_d * C*``.

    Options: ``method`` (see :func:`solve_pcmax`), ``solver`` (MIP backend), ``time_limit``, ``threads``,
    ``lengths`` (``rounds`` | ``paper`` | ``predicted``). The assignment (request id -> client) and the
    loads are in ``extra``; the schedule is the ``hybrid-offline`` policy run on that assignment (replayed;
    its makespan is ``extra["replayed_makespan"]``, which is not the objective of this model).
    """
    method = options.get("method") or "auto"
    solver = options.get("solver") or "highs"
    if method not in PCMAX_METHODS:
        raise InstanceError(f"option 'method': unknown {method!r} (known: {', '.join(PCMAX_METHODS)})")
    if method == "mip" and solver not in MIP_BACKENDS:
        raise InstanceError(f"option 'solver': method 'mip' needs a MIP backend ({', '.join(MIP_BACKENDS)}), got {solver!r}")
    timing = timing_of(instance)
    lengths = options.get("lengths") or "rounds"
    if lengths not in LENGTHS:
        raise InstanceError(f"option 'lengths': unknown {lengths!r} (known: {', '.join(LENGTHS)})")
    p = processing_times(instance, lengths)
    start = time.perf_counter()
    found = solve_pcmax(
        p,
        timing.clients,
        method=method,
        time_limit=float(options.get("time_limit") or 60.0),
        solver=solver,
        threads=options.get("threads"),
    )
    wall = time.perf_counter() - start
    schedule = simulate_pd(instance, list(found.client), sort_queues=False, steal=False, rule="prefill-first")
    rep = replay(instance, schedule)
    if not rep.feasible:
        raise RuntimeError("hybrid-offline schedule does not replay cleanly: " + "; ".join(rep.violations[:3]))
    return SolveResult(
        problem="hybrid-offline",
        solver=found.method,
        status=found.status,
        objective=timing.tau_d * found.makespan,
        bound=timing.tau_d * found.bound,
        wall_time=wall,
        schedule=schedule,
        extra={
            "objective_name": "max_client_load",  # not the replayed schedule's makespan
            "tau_d": timing.tau_d,
            "lengths": lengths,
            "max_load_rounds": found.makespan,
            "bound_rounds": found.bound,
            "assignment": {r.id: c for r, c in zip(instance.requests, found.client)},
            "loads_rounds": loads_of(p, found.client, timing.clients),
            "replayed_makespan": rep.metrics.makespan if rep.metrics else None,
        },
        replay=rep,
    )
