"""Placement heuristics: Aladdin's best fit (Alg. 1) and re-balancing (Alg. 2), and the baselines.

- :func:`best_fit` (Algorithm 1): for each new request in arrival order, try the workers in
  descending ``capacity_norm = sqrt(b_i^2 + (sum_j (l_j + gamma L_j))^2)`` and take the first on which
  (b')-(e') still hold (aggregates are updated after each placement, so requests of one heartbeat
  see each other). If none fits, open a new worker; when the worker count
  is fixed (``max_workers``) and full, fall back to the worker with the least capacity_norm and
  report the request as an overflow (docs/aladdin.md, A12).
- :func:`rebalance` (Algorithm 2, concrete version of docs/aladdin.md, A10): per worker an error point
  ``(l_e, b_e)`` from under-/over-estimated output lengths; the error of a worker is the distance
  ``|k2 l_e + c2 b_e| / sqrt(k2^2 + c2^2)`` of its "equivalent error line" from the origin. Greedy
  single moves of new requests (``x -> y``: ``l_e`` and ``b_e`` move by ``L_j`` and 1) that most
  reduce the sum, each move keeping (b')-(e') on the target, until none improves.
- Baselines (docs/aladdin.md, section 4): :func:`jsq` (fewest outstanding requests, ties to the lowest index),
  :func:`round_robin` and :func:`power_of_two` (two workers drawn uniformly, the one with fewer
  predicted remaining decode tokens). They check no constraint (status ``UNKNOWN``).

All work on the integer data of :func:`~.placement.compile_problem`, so "exact never uses more workers
than best fit" holds by construction of the comparison, not by tolerance.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

import numpy as np

from ...result import Status
from .placement import (
    CompiledProblem,
    Job,
    PlacementProblem,
    PlacementResult,
    WorkerLoad,
    compile_problem,
    used_workers,
)

__all__ = ["best_fit", "rebalance", "jsq", "round_robin", "power_of_two", "HEURISTICS"]


def best_fit(
    problem: PlacementProblem,
    compiled: CompiledProblem | None = None,
    normalise: bool = False,
) -> PlacementResult:
    """Algorithm 1 on one heartbeat.

    Parameters
    ----------
    problem
        The heartbeat.
    compiled
        Its integer data, if already built.
    normalise
        Scale the two capacity_norm components by their (b') capacities (docs/aladdin.md, A11); default is the
        paper's literal norm.

    Returns
    -------
    PlacementResult
        Status ``FEASIBLE`` ((b')-(e') hold on every worker but those of the overflows: requests
        with no feasible worker and no worker left to open, listed in ``unplaceable``).
    """
    t0 = time.perf_counter()
    cp = compiled or compile_problem(problem)
    loads = [load.copy() for load in cp.loads]
    assignment, overflow = _best_fit_into(cp, loads, range(len(problem.new)), normalise)
    return PlacementResult(
        assignment=assignment,
        workers=used_workers(problem, assignment),
        status=Status.FEASIBLE,
        bound=None,
        method="bestfit",
        unplaceable=overflow,
        wall_time=time.perf_counter() - t0,
    )


def _norm(load: WorkerLoad, normalise: bool) -> float:
    if not normalise:
        return load.capacity_norm()
    m = load.cp.model
    b_cap = max(m.theta * (m.atgt - m.c3) / max(m.theta * m.c2, 1e-30), 1.0)
    l_cap = max(m.context_limit(1) * m.theta, 1.0)
    return math.hypot(load.batch / b_cap, load.weighted_context / l_cap)


def _best_fit_into(
    cp: CompiledProblem, loads: list[WorkerLoad], order: Sequence[int], normalise: bool
) -> tuple[dict[str, int], list[str]]:
    problem = cp.problem
    cap = problem.max_workers
    assignment: dict[str, int] = {}
    overflow: list[str] = []
    norms = [_norm(load, normalise) for load in loads]
    for j in order:
        job = problem.new[j]
        wb, wp, peak = int(cp.wb_new[j]), int(cp.wp_new[j]), cp.own_peak(job)
        ranked = sorted(range(len(loads)), key=lambda i: (-norms[i], i))
        chosen = next((i for i in ranked if loads[i].fits(job, wb, wp, peak)), None)
        if chosen is None:
            if cap is None or len(loads) < cap:
                loads.append(cp.empty_load())
                norms.append(0.0)
                chosen = len(loads) - 1
                if not loads[chosen].fits(job, wb, wp):
                    overflow.append(job.id)
            else:
                chosen = min(range(len(loads)), key=lambda i: (norms[i], i))
                overflow.append(job.id)
        loads[chosen].add(job, wb, wp)
        norms[chosen] = _norm(loads[chosen], normalise)
        assignment[job.id] = chosen
    return assignment, overflow


def rebalance(
    problem: PlacementProblem,
    placement: PlacementResult,
    errors: Sequence[tuple[float, float]],
    compiled: CompiledProblem | None = None,
    max_moves: int = 1000,
) -> PlacementResult:
    """Algorithm 2: move new requests between used workers to offset prediction errors.

    Parameters
    ----------
    problem
        The heartbeat.
    placement
        A placement of its new requests (e.g. :func:`best_fit`'s).
    errors
        ``(l_e, b_e)`` per existing worker (accumulated output-length and batch-size errors).
    compiled
        Integer data, if already built.
    max_moves
        Safety cap on the greedy moves.
    """
    t0 = time.perf_counter()
    cp = compiled or compile_problem(problem)
    m = cp.model
    n_total = max([len(problem.ongoing) - 1, *placement.assignment.values()], default=-1) + 1
    loads = [load.copy() for load in cp.loads]
    loads += [cp.empty_load() for _ in range(n_total - len(loads))]
    by_id = {job.id: job for job in problem.new}
    for jid, i in placement.assignment.items():
        loads[i].add(by_id[jid])
    le = np.zeros(n_total)
    be = np.zeros(n_total)
    for i, (l_err, b_err) in enumerate(errors[:n_total]):
        le[i], be[i] = l_err, b_err
    for jid, i in placement.assignment.items():
        le[i] += by_id[jid].length
        be[i] += 1
    norm = math.hypot(m.k2, m.c2) or 1.0

    def dist(i: int, dl: float = 0.0, db: float = 0.0) -> float:
        return abs(m.k2 * (le[i] + dl) + m.c2 * (be[i] + db)) / norm

    assignment = dict(placement.assignment)
    used = sorted({i for i in range(n_total) if loads[i].jobs})
    fixed = set(placement.unplaceable)
    for _ in range(max_moves):
        best = (0.0, None)
        for jid, x in assignment.items():
            if jid in fixed:
                continue
            job = by_id[jid]
            before_x = dist(x)
            after_x = dist(x, -job.length, -1)
            for y in used:
                if y == x:
                    continue
                gain = before_x + dist(y) - after_x - dist(y, job.length, 1)
                if gain > best[0] + 1e-15 and loads[y].fits(job):
                    best = (gain, (jid, x, y))
        if best[1] is None:
            break
        jid, x, y = best[1]
        job = by_id[jid]
        loads[x].remove(job)
        loads[y].add(job)
        le[x] -= job.length
        be[x] -= 1
        le[y] += job.length
        be[y] += 1
        assignment[jid] = y
    return PlacementResult(
        assignment=assignment,
        workers=used_workers(problem, assignment),
        status=Status.FEASIBLE,
        bound=None,
        method="bestfit+rebalance",
        unplaceable=list(placement.unplaceable),
        wall_time=placement.wall_time + (time.perf_counter() - t0),
    )


def _fixed_count(problem: PlacementProblem) -> int:
    if problem.max_workers is None:
        raise ValueError("this placement needs a fixed worker count (max_workers)")
    return problem.max_workers


def _pad(problem: PlacementProblem, n: int) -> list[tuple[Job, ...]]:
    return list(problem.ongoing) + [()] * (n - len(problem.ongoing))


def jsq(problem: PlacementProblem, **_: object) -> PlacementResult:
    """Join the shortest queue: fewest outstanding requests, ties to the lowest index."""
    t0 = time.perf_counter()
    n = _fixed_count(problem)
    counts = [len(jobs) for jobs in _pad(problem, n)]
    assignment = {}
    for job in problem.new:
        i = min(range(n), key=lambda k: (counts[k], k))
        assignment[job.id] = i
        counts[i] += 1
    return _baseline_result(problem, assignment, "jsq", t0)


def round_robin(problem: PlacementProblem, start: int = 0, **_: object) -> PlacementResult:
    """Round robin from worker ``start`` (the router carries the pointer across heartbeats)."""
    t0 = time.perf_counter()
    n = _fixed_count(problem)
    assignment = {job.id: (start + k) % n for k, job in enumerate(problem.new)}
    return _baseline_result(problem, assignment, "rr", t0)


def power_of_two(problem: PlacementProblem, rng: np.random.Generator | None = None, **_: object) -> PlacementResult:
    """Power of two choices on predicted remaining decode tokens (ties to the lower index)."""
    t0 = time.perf_counter()
    n = _fixed_count(problem)
    rng = rng if rng is not None else np.random.default_rng(0)
    load = [sum(max(j.length - j.generated, 0) for j in jobs) for jobs in _pad(problem, n)]
    assignment = {}
    for job in problem.new:
        a, b = (int(v) for v in rng.choice(n, size=2, replace=n < 2))
        i = min((a, b), key=lambda k: (load[k], k))
        assignment[job.id] = i
        load[i] += job.length
    return _baseline_result(problem, assignment, "po2", t0)


def _baseline_result(problem: PlacementProblem, assignment: dict[str, int], method: str, t0: float) -> PlacementResult:
    """A baseline's placement: nothing checked, so status ``UNKNOWN``."""
    return PlacementResult(
        assignment=assignment,
        workers=used_workers(problem, assignment),
        status=Status.UNKNOWN,
        bound=None,
        method=method,
        wall_time=time.perf_counter() - t0,
    )


#: Heuristics by name (best fit variants need no worker count; the others do).
HEURISTICS = {"bestfit": best_fit, "jsq": jsq, "rr": round_robin, "po2": power_of_two}
