"""Minimum GPUs: the fewest workers reaching a target SLO attainment, and a lower bound.

:func:`min_workers` runs the multi-worker simulator (:func:`~.cluster.simulate_cluster`) with a
fixed worker count W and one placement method, and searches W: it starts at ``lo`` (by default one
worker; the lower bound below is the placement model's, not the simulation's), doubles W until the
target attainment is reached, then bisects between the last failing and the first passing W. The
bisection assumes attainment does not drop when a worker is added; every evaluated
``(W, attainment)`` is returned so that the assumption can be inspected. GPUs = W x GPUs per worker.

:func:`heartbeat_lower_bound` is exact for the placement model: at every heartbeat the new
requests must be packed so that (b'), (c') and (e') hold with them alone (ongoing requests only add
load), so the optimum of the offline placement problem of each heartbeat's arrivals, maximised over
heartbeats, bounds the workers of every placement satisfying (a)-(h). It bounds the placement
model (planned lengths), not the simulator's P100 search, whose outcome also depends on the true
lengths and the engine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ...budget import TimeBudget
from ...instance import Instance
from .cluster import ClusterResult, simulate_cluster
from .exact import solve_placement
from .models import AladdinModel, model_from_instance
from .placement import Job, PlacementProblem
from .predictor import BinPredictor

__all__ = ["CapacityResult", "min_workers", "min_workers_scaling", "heartbeat_lower_bound"]


@dataclass
class CapacityResult:
    """Outcome of :func:`min_workers`.

    Attributes
    ----------
    method
        Placement method.
    workers
        Smallest W found reaching the target (None when ``hi`` does not).
    gpus_per_worker
        ``x`` of "W x GPUs".
    target
        Required SLO attainment.
    evaluated
        Attainment of every simulation run, keyed ``W=<w>`` (fixed-W search) or
        ``theta=<t>,W=<w>`` (scaling search).
    best
        The simulation at ``workers``.
    """

    method: str
    workers: int | None
    gpus_per_worker: int
    target: float
    evaluated: dict[str, float] = field(default_factory=dict)
    best: ClusterResult | None = None

    @property
    def gpus(self) -> int | None:
        return None if self.workers is None else self.workers * self.gpus_per_worker

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "workers": self.workers,
            "gpus_per_worker": self.gpus_per_worker,
            "gpus": self.gpus,
            "target": self.target,
            "evaluated": dict(self.evaluated),
            "simulation": None if self.best is None else self.best.summary(),
        }


def min_workers(
    instance: Instance,
    method: str,
    target: float = 1.0,
    *,
    gpus_per_worker: int = 1,
    lo: int = 1,
    hi: int = 256,
    heartbeat: float = 1.0,
    predictor: BinPredictor | None = None,
    solver: str = "cpsat",
    time_limit: float | None = None,
    seed: int = 0,
    ttft_margin: float = 0.0,
) -> CapacityResult:
    """Smallest worker count whose simulation reaches ``target`` attainment (see the module docstring)."""
    if not 0 < target <= 1:
        raise ValueError(f"target attainment must lie in (0, 1], got {target}")
    model = model_from_instance(instance)
    out = CapacityResult(method, None, gpus_per_worker, target)
    runs: dict[int, ClusterResult] = {}

    def ok(w: int) -> bool:
        if w not in runs:
            runs[w] = simulate_cluster(
                instance,
                method,
                w,
                heartbeat=heartbeat,
                predictor=predictor,
                solver=solver,
                time_limit=time_limit,
                model=model,
                seed=seed,
                ttft_margin=ttft_margin,
            )
            out.evaluated[f"W={w}"] = runs[w].attainment
        return runs[w].attainment >= target - 1e-12

    if max(lo, 1) > hi:  # no count up to hi is at least the lower end lo (a proven bound): none reaches the target
        return out
    fail, w = lo - 1, max(lo, 1)
    while not ok(w):
        fail = w
        if w >= hi:
            return out
        w = min(2 * w, hi)
    good = w
    while good - fail > 1:
        mid = (good + fail) // 2
        if ok(mid):
            good = mid
        else:
            fail = mid
    out.workers, out.best = good, runs[good]
    return out


def min_workers_scaling(
    instance: Instance,
    method: str,
    target: float = 1.0,
    *,
    thetas: tuple[float, ...] = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5),
    gpus_per_worker: int = 1,
    heartbeat: float = 1.0,
    predictor: BinPredictor | None = None,
    solver: str = "cpsat",
    time_limit: float | None = None,
    ttft_margin: float = 0.0,
) -> CapacityResult:
    """Aladdin's own scaling: placement opens workers as needed (Alg. 1), for each margin theta.

    For ``exact`` and ``bestfit*`` only. Each theta gives the workers opened and the simulated
    attainment (docs/aladdin.md, A16); the result is the fewest workers among the thetas reaching ``target``.
    """
    if method not in ("exact", "bestfit", "bestfit+rebalance"):
        raise ValueError(f"method {method!r} does not open workers; use min_workers")
    base = model_from_instance(instance)
    out = CapacityResult(f"{method} (scaling)", None, gpus_per_worker, target)
    for theta in thetas:
        res = simulate_cluster(
            instance,
            method,
            None,
            heartbeat=heartbeat,
            predictor=predictor,
            solver=solver,
            time_limit=time_limit,
            model=base.with_knobs(theta=theta),
            ttft_margin=ttft_margin,
        )
        out.evaluated[f"theta={theta:g},W={res.workers}"] = res.attainment
        if res.attainment >= target - 1e-12 and (out.workers is None or res.workers < out.workers):
            out.workers, out.best = res.workers, res
    return out


def heartbeat_lower_bound(
    instance: Instance,
    *,
    heartbeat: float = 1.0,
    predictor: BinPredictor | None = None,
    model: AladdinModel | None = None,
    solver: str = "cpsat",
    time_limit: float | None = 10.0,
) -> int:
    """``max`` over heartbeats of the exact offline optimum for that heartbeat's arrivals.

    Uses each placement's proven bound (the optimum when solved, else the solver's bound), so the
    result is a valid lower bound even when a heartbeat hits ``time_limit``.
    """
    model = model or model_from_instance(instance)
    slots: dict[int, list[Job]] = {}
    for r in instance.requests:
        length = predictor.predict(r.prompt_tokens) if predictor else (r.predicted_output_tokens or r.output_tokens)
        slots.setdefault(int(math.ceil(r.arrival / heartbeat - 1e-12)), []).append(Job(r.id, r.prompt_tokens, length))
    best = 0
    for jobs in slots.values():
        res = solve_placement(PlacementProblem(model, (), tuple(jobs)), solver=solver, budget=TimeBudget.of(time_limit))
        if res.bound is not None:
            best = max(best, int(math.ceil(res.bound - 1e-9)))
    return best
