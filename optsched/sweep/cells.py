"""Cells of a sweep: the grid, their content hashes, and running one cell into rows.

A *cell* is one point of the cross product workloads x cost_model x limit axes x rate_scale. It
runs every ``run`` entry of the spec on the cell's instance and yields one row per schedule or
bound (:data:`COLUMNS`). Every schedule is replayed (:func:`optsched.schedule.replay`) before any
of its numbers enters a row; a schedule that does not replay cleanly is a row with status
``invalid``, never a metric.

Order inside a cell: bounds first, then solves, then policies, so that every schedule's ``gap``
is measured to the best proven bound of its cell (generic bounds, bounders, solver bounds).
A run entry that raises is a row with status ``error`` and the exception in ``error``; it never
stops the cell or the sweep.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import time
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import api, policies
from ..instance import Instance, InstanceError
from ..result import Status, objective_of, relative_gap
from ..schedule import Metrics, ReplayResult, replay
from ..workload import WorkloadTransforms, apply_transforms
from .spec import LIMIT_AXES, RunSpec, SweepSpec

__all__ = [
    "COLUMNS",
    "METRIC_COLUMNS",
    "OPTIONAL_COLUMNS",
    "Cell",
    "SloTarget",
    "cell_error_rows",
    "cell_key",
    "expand_cells",
    "make_row",
    "run_cell",
    "workload_digest",
]

#: Bump when the rows a cell produces change meaning: old results are then not resumed.
ROW_VERSION = 1

#: Columns a part file may lack (read as null): a capacity row's requests and tokens per second.
OPTIONAL_COLUMNS = ("req_per_s", "tokens_per_s")

#: The cell's parameters, as columns.
PARAM_COLUMNS = ("workload", "cost_model", *LIMIT_AXES, "rate_scale")


def _metric_columns() -> dict[str, str]:
    hints = typing.get_type_hints(Metrics)
    return {f.name: ("int64" if hints[f.name] is int else "float64") for f in dataclasses.fields(Metrics)}


#: Every metric of the replay (:class:`optsched.schedule.Metrics`), with its Arrow type.
METRIC_COLUMNS: dict[str, str] = _metric_columns()

#: Every column of a row, in order, with its Arrow type.
COLUMNS: dict[str, str] = {
    "sweep": "string",
    "workload": "string",
    "cost_model": "string",
    **dict.fromkeys(LIMIT_AXES, "int64"),
    "rate_scale": "float64",
    "requests": "int64",
    "kind": "string",
    "policy": "string",
    "solver": "string",
    "status": "string",
    "error": "string",
    "objective": "float64",
    **METRIC_COLUMNS,
    "bound": "float64",
    "gap": "float64",
    "time_limit": "float64",
    "slo_ttft": "float64",
    "slo_tpot": "float64",
    "attainment": "float64",
    "slo_met": "bool",
    "replicas": "int64",
    "req_per_s": "float64",
    "tokens_per_s": "float64",
    "wall_time": "float64",
    "cell": "string",
}


@dataclass(frozen=True)
class SloTarget:
    """A capacity target: the ``attainment`` quantile of TTFT and of TPOT within their limits."""

    ttft: float | None
    tpot: float | None
    attainment: float = 0.99

    def met_by(self, result: ReplayResult) -> bool:
        """Whether a clean replay meets the target (numpy's linear quantile over the requests
        where the value is defined; a quantity with no defined value meets any limit)."""
        outs = list(result.outcomes.values())
        for limit, values in ((self.ttft, [o.ttft for o in outs]), (self.tpot, [o.tpot for o in outs])):
            defined = [v for v in values if v is not None]
            if limit is not None and defined and float(np.quantile(defined, self.attainment)) > limit:
                return False
        return True

    def columns(self) -> dict[str, Any]:
        return {"slo_ttft": self.ttft, "slo_tpot": self.tpot, "attainment": self.attainment}


@dataclass(frozen=True)
class Cell:
    """One point of the grid, with what to run on it.

    ``workload_index`` points into the spec's workloads (the driver holds their base instances);
    ``cost_model`` and ``limits`` are the cell's overrides (None / absent: the workload's own).
    """

    sweep: str
    workload: str
    workload_index: int
    base_digest: str
    cost_model: str | Mapping[str, Any] | None
    limits: tuple[tuple[str, int | None], ...]
    rate_scale: float
    run: RunSpec
    slo: SloTarget | None = None
    key: str = field(default="", compare=False)


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def workload_digest(instance: Instance) -> str:
    """Content hash of a base instance (its contract JSON, the cost model's coefficients included)."""
    data = instance.to_dict()
    data["cost_model"] = {**instance.cost_model.to_dict(), "name": instance.cost_model.name}
    return hashlib.sha256(_canonical(data).encode()).hexdigest()


def cell_key(cell: Cell) -> str:
    """Content hash of a cell's inputs: base instance, overrides, run entries and target."""
    payload = {
        "version": ROW_VERSION,
        "columns": list(COLUMNS),  # rows of another schema (e.g. other replay metrics) are not reused
        "sweep": cell.sweep,
        "workload": [cell.workload, cell.base_digest],
        "cost_model": cell.cost_model,
        "limits": list(cell.limits),
        "rate_scale": cell.rate_scale,
        "run": cell.run.model_dump(mode="json"),
        "slo": None if cell.slo is None else dataclasses.asdict(cell.slo),
    }
    return hashlib.sha256(_canonical(payload).encode()).hexdigest()[:32]


def expand_cells(
    spec: SweepSpec,
    digests: list[str],
    run: RunSpec | None = None,
    rate_scales: list[float] | None = None,
    slo: SloTarget | None = None,
) -> list[Cell]:
    """The grid's cells, in spec order (workload, cost model, limit axes, rate scale)."""
    from .workloads import cost_model_ref

    models = [cost_model_ref(spec, m) for m in spec.cost_model] if spec.cost_model else [None]
    axes = [(name, spec.limits[name]) for name in LIMIT_AXES if name in spec.limits]
    combos: list[tuple[tuple[str, int | None], ...]] = [()]
    for name, values in axes:
        combos = [(*c, (name, v)) for c in combos for v in values]
    cells = []
    for w, (entry, digest) in enumerate(zip(spec.workloads, digests)):
        for model in models:
            for limits in combos:
                for scale in rate_scales or spec.rate_scale:
                    cell = Cell(spec.name, entry.label, w, digest, model, limits, float(scale), run or spec.run, slo)
                    cells.append(dataclasses.replace(cell, key=cell_key(cell)))
    return cells


# --------------------------------------------------------------------------- running a cell


def make_row(cell: Cell, instance: Instance | None, **values: Any) -> dict[str, Any]:
    """A row of ``cell``: its parameters (the instance's own values when it could be built), then
    ``values``; every other column null."""
    row: dict[str, Any] = dict.fromkeys(COLUMNS)
    row.update(sweep=cell.sweep, workload=cell.workload, rate_scale=cell.rate_scale, cell=cell.key)
    if instance is not None:
        row.update(
            cost_model=instance.cost_model.name,
            requests=len(instance.requests),
            **{k: getattr(instance.limits, k) for k in LIMIT_AXES},
        )
    else:
        model = cell.cost_model
        row["cost_model"] = model.get("name") if isinstance(model, Mapping) else model
        row.update(dict(cell.limits))
    if cell.slo is not None:
        row.update(cell.slo.columns())
    row.update(values)
    return row


def _metrics(result: ReplayResult, objective: str) -> dict[str, Any]:
    assert result.metrics is not None
    return {**result.metrics.to_dict(), "objective": objective_of(result, objective)}


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _bound_rows(cell: Cell, instance: Instance) -> Iterator[dict[str, Any]]:
    settings = cell.run.bounds
    if settings is None:
        return
    from ..load_bounds import proven_bounds  # numba: loaded by the cells that need it, not by the CLI's start

    t0 = time.perf_counter()
    for b in proven_bounds(instance, cell.run.objective):
        yield make_row(
            cell,
            instance,
            kind="bound",
            policy=f"generic:{b.name}",
            status="proven" if b.valid else "estimate",
            bound=b.value,
            wall_time=time.perf_counter() - t0,
        )
    for name in settings.problems:
        t0 = time.perf_counter()
        try:
            found = api.bound(instance, name, settings.options_of(name, cell.run.objective))
        except Exception as exc:  # noqa: BLE001 - a bounder that fails is a row, never a lost cell
            yield make_row(
                cell,
                instance,
                kind="bound",
                policy=f"{name}:",
                status="error",
                error=_error(exc),
                time_limit=settings.time_limit,
                wall_time=time.perf_counter() - t0,
            )
            continue
        for b in found:
            yield make_row(
                cell,
                instance,
                kind="bound",
                policy=f"{name}:{b.name}",
                status="proven" if b.valid else "estimate",
                bound=float(b.value),
                time_limit=settings.time_limit,
                wall_time=time.perf_counter() - t0,
            )


def _solve_rows(cell: Cell, instance: Instance) -> Iterator[dict[str, Any]]:
    for entry in cell.run.solve:
        t0 = time.perf_counter()
        base = {"kind": "solve", "policy": f"solver:{entry.problem}", "time_limit": entry.time_limit}
        try:
            target = _with_target(cell, instance)
            options = entry.options_with(cell.run.objective)  # the entry's own options win
            result = api.solve(target, entry.problem, options)  # replayed and checked (api.checked)
            values: dict[str, Any] = {"solver": result.solver, "status": str(result.status), "bound": result.bound}
            if result.replay is not None and result.schedule is not None:
                # metrics against the cell's own instance, as the policies' rows (the target only adds SLOs)
                replayed = result.replay if target is instance else replay(instance, result.schedule)
                values.update(_metrics(replayed, cell.run.objective))
                if cell.slo is not None:
                    values["slo_met"] = cell.slo.met_by(replayed)
        except api.ScheduleRejected as exc:
            values = {"solver": entry.problem, "status": "invalid", "error": str(exc), "bound": None}
        except Exception as exc:  # noqa: BLE001 - recorded, never stops the sweep
            values = {"status": "error", "error": _error(exc)}
        yield make_row(cell, instance, **base, **values, wall_time=time.perf_counter() - t0)


def _with_target(cell: Cell, instance: Instance) -> Instance:
    """The instance a solve of a capacity probe gets: with objective ``goodput``, every request
    without an SLO takes the target's TTFT and TPOT limits as its own (the solve then maximises the
    requests within them)."""
    if cell.slo is None or cell.run.objective != "goodput":
        return instance
    return apply_transforms(instance, WorkloadTransforms(slo_ttft=cell.slo.ttft, slo_tpot=cell.slo.tpot))


def _policy_target(cell: Cell, instance: Instance, name: str) -> Instance:
    """The instance policy ``name`` runs on: a policy that schedules by SLO targets
    (:func:`optsched.policies.reads_slo`) sees a capacity probe's TTFT and TPOT limits as the
    targets of the requests without their own; its schedule is replayed on the cell's instance."""
    if cell.slo is None or not policies.reads_slo(name):
        return instance
    return apply_transforms(instance, WorkloadTransforms(slo_ttft=cell.slo.ttft, slo_tpot=cell.slo.tpot))


def _simulate_rows(cell: Cell, instance: Instance) -> Iterator[dict[str, Any]]:
    for name in cell.run.simulate:
        t0 = time.perf_counter()
        values: dict[str, Any]
        try:
            result = replay(instance, policies.simulator_for(name)(_policy_target(cell, instance, name)))
            if result.feasible:
                values = {"status": "ok", **_metrics(result, cell.run.objective)}
                if cell.slo is not None:
                    values["slo_met"] = cell.slo.met_by(result)
            else:
                values = {"status": "invalid", "error": "; ".join(result.violations[:3])}
        except InstanceError as exc:  # the policy does not apply to this instance
            values = {"status": "n/a", "error": str(exc)}
        except Exception as exc:  # noqa: BLE001 - recorded, never stops the sweep
            values = {"status": "error", "error": _error(exc)}
        yield make_row(cell, instance, kind="simulate", policy=name, **values, wall_time=time.perf_counter() - t0)


def _with_gaps(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each schedule's gap to its cell's best proven bound (bound rows: gap to the best schedule)."""
    proven = [r["bound"] for r in rows if r["kind"] == "bound" and r["status"] == "proven"]
    proven += [
        r["bound"]
        for r in rows
        if r["kind"] == "solve"
        and r["bound"] is not None
        and r["status"] in (Status.OPTIMAL, Status.FEASIBLE, Status.TIME_LIMIT)
    ]
    finite = [b for b in proven if b is not None and math.isfinite(b)]
    best_bound = max(finite) if finite else None
    values = [r["objective"] for r in rows if r["kind"] != "bound" and r["objective"] is not None]
    best_value = min(values) if values else None
    for r in rows:
        if r["kind"] == "bound":
            r["gap"] = relative_gap(best_value, r["bound"]) if r["status"] == "proven" else None
        elif r["objective"] is not None:
            if r["kind"] == "simulate":
                r["bound"] = best_bound
            r["gap"] = relative_gap(r["objective"], r["bound"] if r["kind"] == "solve" else best_bound)
    return rows


def run_cell(cell: Cell, base: Instance) -> list[dict[str, Any]]:
    """Every row of one cell (see the module docstring); never raises for a cell's own failure."""
    from .workloads import cell_instance

    try:
        instance = cell_instance(base, cell.cost_model, dict(cell.limits), cell.rate_scale)
    except InstanceError as exc:
        return cell_error_rows(cell, _error(exc))
    rows = [*_bound_rows(cell, instance), *_solve_rows(cell, instance), *_simulate_rows(cell, instance)]
    return _with_gaps(rows)


def cell_error_rows(cell: Cell, message: str) -> list[dict[str, Any]]:
    """One ``error`` row per run entry of a cell that could not run at all (bad instance, or its
    worker died more often than the retries allow)."""
    entries = [("bound", "generic:")] if cell.run.bounds else []
    entries += [("solve", f"solver:{s.problem}") for s in cell.run.solve]
    entries += [("simulate", p) for p in cell.run.simulate]
    return [make_row(cell, None, kind=kind, policy=policy, status="error", error=message) for kind, policy in entries]
