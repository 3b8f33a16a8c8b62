"""A :class:`~optsched.report.records.Report` as JSON (``report_to_dict``) and as table rows
(``report_rows``; the terminal tables: :mod:`optsched.report.terminal`).

The JSON keys are documented in ``docs/report.md``. Everything outside the ``run`` key is a
function of the instance, the options and the (deterministic) policies and bounds; wall times live
under ``run``. A solver stopped by its time limit may return different schedules from run to run.
"""

from __future__ import annotations

from typing import Any

from ..metrics import TAIL_KEYS
from .gather import HIGHLIGHTED_POLICIES
from .records import Report

__all__ = ["HIGHLIGHTED_POLICIES", "METRIC_KEYS", "grouped_messages", "report_rows", "report_to_dict"]

#: Schedule metrics shown for every schedule (docs/schedule.md).
METRIC_KEYS = ("makespan", "mean_latency", "mean_ttft", "mean_tpot", "throughput", "evictions", "slo_attainment", "G")


def _metrics(replay: Any) -> dict[str, Any] | None:
    if replay is None or replay.metrics is None:
        return None
    m = replay.metrics.to_dict()
    return {k: m[k] for k in (*METRIC_KEYS, "batches", "goodput", *TAIL_KEYS)}


def report_rows(report: Report) -> list[dict[str, Any]]:
    """One row per schedule: the solver's (when run), then every policy's, best objective first."""
    rows: list[dict[str, Any]] = []
    s = report.solver
    if s is not None:
        res = s.result
        rows.append({
            "kind": "solver",
            "name": s.label.removeprefix("solver:"),
            "status": res.status if res is not None else "not run",
            "objective": res.objective if res is not None and s.replay is not None else None,
            "gap": None,
            "metrics": _metrics(s.replay),
            "message": s.message,
        })
    for p in report.policies:
        rows.append({
            "kind": "policy",
            "name": p.policy,
            "status": p.status,
            "objective": p.objective,
            "gap": None,
            "metrics": _metrics(p.replay) if p.status == "ok" else None,
            "message": p.message,
        })
    for row in rows:
        row["gap"] = report.gap(row["objective"])
    sign = -1.0 if report.maximised else 1.0
    rows.sort(
        key=lambda r: (
            r["objective"] is None,
            sign * r["objective"] if r["objective"] is not None else 0.0,
            r["kind"] != "solver",
            r["name"],
        )
    )
    return rows


def grouped_messages(rows: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """(message, schedule labels) of the rows that did not run cleanly, one entry per message."""
    groups: dict[str, list[str]] = {}
    for row in rows:
        if row["message"] and row["status"] != "ok":
            groups.setdefault(row["message"], []).append(f"{row['kind']}:{row['name']}")
    return list(groups.items())


def report_to_dict(report: Report) -> dict[str, Any]:
    """The report's JSON object (keys documented in docs/report.md)."""
    inst = report.instance
    best_bound = report.best_bound
    best = report.best
    rows = report_rows(report)
    solver = None
    if report.solver is not None:
        s = report.solver
        res = s.result
        solver = {
            "problem": s.problem,
            "solver": res.solver if res is not None else None,
            "status": res.status if res is not None else "not run",
            "objective": res.objective if res is not None and s.replay is not None else None,
            "bound": res.bound if res is not None else None,
            "gap": res.gap if res is not None else None,
            "message": s.message,
            "seed": s.seed,
        }
    return {
        "instance": inst.name,
        "requests": len(inst.requests),
        "cost_model": inst.cost_model.name,
        "limits": inst.limits.to_dict(),
        "objective": report.objective,
        "bounds": [b.to_dict() for b in report.bounds],
        "best_bound": None
        if best_bound is None
        else {"source": best_bound.source, "name": best_bound.name, "value": best_bound.value},
        "best": None
        if best is None
        else {
            "source": best[0],
            "objective": best[1],
            "gap": report.gap(best[1]),
            "proven_optimal": report.proven_optimal,
            "metrics": _metrics(best[3]),
        },
        "solver": solver,
        "tail_bounds": dict(report.tail_bounds),
        "schedules": [dict(row) for row in rows],
        "partial": report.partial,
        "notes": list(report.notes),
        "run": {
            "time_limit": report.time_limit,
            "wall_time": report.wall_time,
            "phase_times": dict(report.phase_times),
            "policy_wall_times": {p.policy: p.wall_time for p in report.policies},
            "bounder_wall_times": dict(report.bounder_times),
            "solver_wall_time": report.solver.wall_time if report.solver is not None else None,
        },
    }
