"""Fewest engines: per cell and router, the fewest replicas whose cluster simulation meets a target.

For every cell of the grid (workload x cost model x limits x rate_scale) and every router of
``replicas.routers`` (the Aladdin placement ``bestfit`` / ``bestfit+rebalance`` / ``exact``, join
the shortest queue ``jsq``, round robin ``rr``, power of two ``po2``), one job runs
:func:`optsched.problems.aladdin.capacity.min_workers`: the multi-worker simulator (every worker's
schedule replayed) with W engines, W doubled then bisected, up to ``replicas.max_replicas``. The
target is Aladdin's: the share of requests meeting both their TTFT and TPOT (ATGT) limits is at
least ``attainment``; the limits are given to the instance as its top-level ``slo``.
The simulator needs Aladdin's cost-model form (linear prefill, docs/aladdin.md); a cell whose
profile is not of that form is a row with status ``n/a`` and the reason.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from typing import Any

from ..budget import TimeBudget
from ..instance import Instance, InstanceError, parse_instance
from ..progress import Progress
from .cells import Cell, SloTarget, expand_cells, make_row
from .runner import Executor, Workloads
from .spec import ReplicasSpec, RunSpec, SpecError, SweepSpec
from .store import SweepStore

__all__ = ["check_replicas_spec", "replicas_search", "run_replicas"]


def _job_key(cell: Cell, router: str, settings: ReplicasSpec) -> str:
    payload = {"cell": cell.key, "router": router, "replicas": settings.model_dump()}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:32]


def _with_slo(instance: Instance, target: SloTarget) -> Instance:
    data = instance.to_dict()
    data["cost_model"] = {**instance.cost_model.to_dict(), "name": instance.cost_model.name}
    data["slo"] = {k: v for k, v in (("ttft", target.ttft), ("atgt", target.tpot)) if v is not None}
    return parse_instance(data, instance.name)


def run_replicas(cell: Cell, base: Instance, router: str, settings: ReplicasSpec, key: str) -> list[dict[str, Any]]:
    """The row of one cell and router (never raises for the cell's own failure)."""
    from ..problems.aladdin.capacity import min_workers
    from .workloads import cell_instance

    t0 = time.perf_counter()
    cell = dataclasses.replace(cell, key=key)
    try:
        instance = _with_slo(cell_instance(base, cell.cost_model, dict(cell.limits), cell.rate_scale), cell.slo)
    except InstanceError as exc:
        return [make_row(cell, None, kind="replicas", policy=router, status="error", error=str(exc))]
    values: dict[str, Any]
    try:
        found = min_workers(
            instance, router, cell.slo.attainment, hi=settings.max_replicas, heartbeat=settings.heartbeat
        )
        values = {"status": "ok" if found.workers is not None else "above_range", "replicas": found.workers}
        if found.best is not None:
            values["slo_met"] = True
    except InstanceError as exc:  # not an Aladdin instance: the router model does not apply
        values = {"status": "n/a", "error": str(exc)}
    except Exception as exc:  # noqa: BLE001 - recorded, never stops the sweep
        values = {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
    return [make_row(cell, instance, kind="replicas", policy=router, **values, wall_time=time.perf_counter() - t0)]


def check_replicas_spec(spec: SweepSpec) -> None:
    """Raise :class:`SpecError` when ``spec`` names a router the search does not know (before any work)."""
    from ..problems.aladdin.cluster import METHODS

    unknown = [r for r in spec.replicas.routers if r not in METHODS or r == "given"]
    if unknown:
        raise SpecError(
            f"{spec.source}: replicas.routers: unknown router {unknown[0]!r} "
            f"(known: {', '.join(m for m in METHODS if m != 'given')})"
        )


def _unfinished(cell: Cell, router: str) -> dict[str, Any]:
    """The summary row of a job the time limit left unfinished."""
    return make_row(cell, None, kind="replicas", policy=router, status="time_limit")


def replicas_search(
    spec: SweepSpec,
    workloads: Workloads,
    executor: Executor,
    store: SweepStore,
    target: SloTarget,
    *,
    show_progress: bool | None = None,
    budget: TimeBudget | None = None,
) -> dict[str, Any]:
    """Run the fewest-engines search of every cell and router within ``budget``; a summary for the
    CLI (jobs not finished in time are listed with status ``time_limit`` and left for ``--resume``)."""
    budget = budget or TimeBudget()
    check_replicas_spec(spec)
    t0 = time.perf_counter()
    cells = expand_cells(spec, workloads.digests, RunSpec(), slo=target)
    jobs = {_job_key(c, r, spec.replicas): (c, r) for c in cells for r in spec.replicas.routers}
    stored = store.done_keys()
    todo = {k: v for k, v in jobs.items() if k not in stored}
    handles = [executor.share(i) for i in workloads.instances]
    executor.start()  # before the progress display's thread (a pool forks its workers while none runs)
    progress = Progress("cells", len(todo), "cells", enabled=show_progress is not False)
    try:
        for key, (cell, router) in todo.items():
            executor.submit(key, run_replicas, cell, handles[cell.workload_index], router, spec.replicas, key)
        for _ in range(len(todo)):
            finished = executor.next_done(budget.left())
            if finished is None:
                break
            key, rows, error = finished
            if error is not None:
                cell, router = todo[key]
                rows = [
                    make_row(
                        dataclasses.replace(cell, key=key),
                        None,
                        kind="replicas",
                        policy=router,
                        status="error",
                        error=error,
                    )
                ]
            store.write(key, rows)
            progress.advance()
    finally:
        progress.close()
    done = store.done_keys()
    results = [store.rows_of(k)[0] if k in done else _unfinished(*jobs[k]) for k in jobs]
    return {
        "jobs": len(jobs),
        "already_stored": len(jobs) - len(todo),
        "unfinished": len(jobs) - len(done & jobs.keys()),
        "wall_time": time.perf_counter() - t0,
        "replicas": [
            {k: r[k] for k in ("workload", "cost_model", "kv_capacity", "rate_scale", "policy", "replicas", "status")}
            for r in results
        ],
    }
