"""A :class:`~optsched.report.gather.Report` as JSON (``report_to_dict``) and as a terminal table.

The JSON keys are documented in ``docs/report.md``. Everything outside the ``run`` key is a
function of the instance, the options and the (deterministic) policies and bounds; wall times live
under ``run``. A solver stopped by its time limit may return different schedules from run to run.
"""

from __future__ import annotations

import math
from typing import Any

from ..metrics import TAIL_KEYS
from .gather import Report

__all__ = ["METRIC_KEYS", "TABLE_KEYS", "grouped_messages", "report_rows", "report_to_dict", "report_table"]

#: Schedule metrics shown for every schedule (docs/schedule.md).
METRIC_KEYS = ("makespan", "mean_latency", "mean_ttft", "mean_tpot", "throughput", "evictions", "slo_attainment", "G")
#: The metrics shown in the terminal and HTML tables: means, P99s, goodput.
TABLE_KEYS = (
    "makespan",
    "mean_latency",
    "latency_p99",
    "mean_ttft",
    "ttft_p99",
    "mean_tpot",
    "tpot_p99",
    "queue_p99",
    "throughput",
    "goodput",
    "evictions",
    "slo_attainment",
)


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
            "name": s.problem,
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


def _fmt(value: Any, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return "inf" if value > 0 else "-inf"
        return f"{value:.{digits}g}"
    return str(value)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _grid(header: list[str], rows: list[list[str]], left: tuple[int, ...] = (0,)) -> str:
    """A plain-text table; columns in ``left`` are left-aligned, the others right-aligned."""
    widths = [max(len(h), *(len(r[k]) for r in rows)) if rows else len(h) for k, h in enumerate(header)]

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.ljust(w) if k in left else c.rjust(w) for k, (c, w) in enumerate(zip(cells, widths))
        ).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def report_table(report: Report) -> str:
    """The report as plain-text tables (bounds, then schedules with their gap to the best bound)."""
    inst = report.instance
    lim = inst.limits
    out = [
        f"instance {inst.name}: {len(inst.requests)} requests, cost model {inst.cost_model.name}, "
        f"C={lim.token_budget} P={lim.prefill_budget} M={_fmt(lim.kv_capacity)} R_max={_fmt(lim.max_running)}",
        f"objective: {report.objective}" + ("   (PARTIAL REPORT)" if report.partial else ""),
        "",
        "Lower bounds",
    ]
    best_bound = report.best_bound
    out.append(
        _grid(
            ["source", "bound", "value", "proven", "compared", "note"],
            [[b.source, b.name, _fmt(b.value, 6), _fmt(b.valid), _fmt(b.comparable), b.note] for b in report.bounds],
            left=(0, 1, 5),
        )
    )
    if best_bound is not None:
        out.append(f"best proven bound: {best_bound.value:.6g} ({best_bound.source}/{best_bound.name})")
    if report.tail_bounds:
        tails = ", ".join(f"{k} >= {v:.4g} s" for k, v in report.tail_bounds.items() if v is not None)
        out.append(f"every schedule's {tails} (proven, infermax/goodput_bounds.py)")
    gap_rule = "(best bound - value) / best bound" if report.maximised else "(value - best bound) / value"
    out += ["", f"Schedules (every one replayed; gap = {gap_rule})"]
    rows = report_rows(report)
    columns = [k for k in TABLE_KEYS if k != report.objective]
    body = []
    for r in rows:
        m = r["metrics"] or {}
        body.append([
            f"{r['kind']}:{r['name']}",
            r["status"],
            _fmt(r["objective"], 6),
            _pct(r["gap"]),
            *(_fmt(m.get(k)) for k in columns),
        ])
    out.append(_grid(["schedule", "status", report.objective, "gap", *columns], body, left=(0, 1)))
    best = report.best
    if best is not None:
        gap = report.gap(best[1])
        proof = (
            f", proven optimal by {best_bound.source}/{best_bound.name}" if report.proven_optimal and best_bound else ""
        )
        out.append(f"best schedule: {best[0]} with {report.objective} {best[1]:.6g} (gap {_pct(gap)}{proof})")
    for message, names in grouped_messages(rows):
        out.append(f"  {', '.join(names)}: {message}")
    for note in report.notes:
        out.append(f"note: {note}")
    return "\n".join(out)
