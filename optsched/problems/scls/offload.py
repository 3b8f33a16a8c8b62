r"""SCLS offloading (Sec. 4.5, Eq. 11) against the exact makespan, and the adaptive interval (Eq. 12).

P-OFFLOAD (docs/scls.md) is :math:`P \mid a_w \mid C_{max}`: batches with estimated times
:math:`t_b` go to W workers whose queues already hold :math:`a_w = T_{load}(w)`:

.. math::

    \min C \quad \text{s.t. } \sum_w x_{bw} = 1, \quad a_w + \sum_b t_b x_{bw} \le C, \quad x_{bw} \in \{0,1\}.

- :func:`max_min_offload`: the paper's rule, batches by decreasing :math:`t_b`, each to the worker
  of least load (ties: lowest id), :math:`T_{load}(w) \mathrel{+}= t_b` (Eq. 11) — LPT list
  scheduling.
- :func:`exact_offload`: the model above in CP-SAT on integer times (microseconds), returning the
  optimal makespan or, at the time limit, the best one and the proven lower bound.
- :func:`adaptive_interval`: :math:`T \leftarrow \max(\lambda \min_w T_{load}(w), \Gamma)` (Eq. 12).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ortools.sat.python import cp_model

from ...budget import TimeBudget
from ...cpsat_solver import run_model
from ...result import Status

__all__ = ["Offload", "adaptive_interval", "exact_offload", "max_min_offload"]

RESOLUTION = 1e-6


@dataclass(frozen=True, kw_only=True)
class Offload:
    """Worker of each batch, final loads, makespan (s), status and proven lower bound (s)."""

    assignment: tuple[int, ...]
    loads: tuple[float, ...]
    makespan: float
    status: Status = Status.FEASIBLE
    bound: float | None = None


def _loads(times: Sequence[float], initial: Sequence[float], assignment: Sequence[int]) -> tuple[float, ...]:
    loads = list(initial)
    for b, w in enumerate(assignment):
        loads[w] += times[b]
    return tuple(loads)


def max_min_offload(times: Sequence[float], initial: Sequence[float]) -> Offload:
    """The max-min (LPT) rule of Eq. 11."""
    loads = list(initial)
    assignment = [0] * len(times)
    for b in sorted(range(len(times)), key=lambda b: (-times[b], b)):
        w = min(range(len(loads)), key=lambda w: (loads[w], w))
        assignment[b] = w
        loads[w] += times[b]
    final = _loads(times, initial, assignment)
    return Offload(assignment=tuple(assignment), loads=final, makespan=max(final))


#: The time of :func:`exact_offload` called without a budget, in seconds.
OFFLOAD_TIME = 10.0


def exact_offload(
    times: Sequence[float],
    initial: Sequence[float],
    budget: TimeBudget | None = None,
    threads: int = 2,
    start: Offload | None = None,
) -> Offload:
    """Optimal :math:`P \\mid a_w \\mid C_{max}` by CP-SAT (times rounded to microseconds), within
    ``budget`` (None: :data:`OFFLOAD_TIME` seconds).

    ``start`` (e.g. :func:`max_min_offload`) is the search's hint and the result when the budget
    expires before CP-SAT finds an assignment or when it is better in true times (status
    ``time_limit`` unless CP-SAT proved the rounded optimum). Each rounded time is within
    ``RESOLUTION / 2`` of the true one, so the true optimum is at least CP-SAT's bound minus
    ``(len(times) + 1) * RESOLUTION / 2`` (the bound returned), and ``optimal`` means optimal up to
    that rounding.
    """
    tick = [int(round(t / RESOLUTION)) for t in times]
    base = [int(round(a / RESOLUTION)) for a in initial]
    workers, batches = range(len(initial)), range(len(times))
    m = cp_model.CpModel()
    x = {(b, w): m.NewBoolVar(f"x_{b}_{w}") for b in batches for w in workers}
    cmax = m.NewIntVar(max(base), max(base) + sum(tick), "C")
    for b in batches:
        m.AddExactlyOne(x[b, w] for w in workers)
    for w in workers:
        m.Add(base[w] + sum(tick[b] * x[b, w] for b in batches) <= cmax)
    m.Minimize(cmax)
    if start is not None:
        for b in batches:
            for w in workers:
                m.AddHint(x[b, w], int(start.assignment[b] == w))
    run = run_model(m, budget=budget if budget is not None else TimeBudget.of(OFFLOAD_TIME), workers=threads)
    bound = max(max(initial), (run.bound - (len(tick) + 1) / 2) * RESOLUTION)
    if not run.found:
        if start is None or run.status != Status.UNKNOWN:
            raise RuntimeError(f"exact offloading found no solution ({run.name})")
        return Offload(
            assignment=start.assignment,
            loads=start.loads,
            makespan=start.makespan,
            status=Status.TIME_LIMIT,
            bound=bound,
        )
    assignment = tuple(next(w for w in workers if run.value(x[b, w])) for b in batches)
    final = _loads(times, initial, assignment)
    status = Status.OPTIMAL if run.status == Status.OPTIMAL else Status.TIME_LIMIT
    if start is not None and start.makespan < max(final):
        return Offload(
            assignment=start.assignment, loads=start.loads, makespan=start.makespan, status=status, bound=bound
        )
    return Offload(assignment=assignment, loads=final, makespan=max(final), status=status, bound=min(bound, max(final)))


def adaptive_interval(loads: Sequence[float], lam: float = 0.5, gamma: float = 6.0) -> float:
    """Eq. 12: the next schedule interval, :math:`\\max(\\lambda \\min_w T_{load}(w), \\Gamma)`."""
    return max(lam * min(loads), gamma)
