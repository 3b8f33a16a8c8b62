"""Running a sweep: load the workloads, expand the grid, run the cells not yet stored, store rows.

:func:`run_sweep` is what ``optsched sweep`` calls. Rows are written as cells finish (one file
per cell, :class:`~optsched.sweep.store.SweepStore`); with ``resume`` the cells whose key is
already stored are skipped, so an interrupted sweep (Ctrl-C, a killed worker, node or driver)
loses at most the cells in flight and never writes a row twice. A time limit (``budget``) ends the
sweep the same way: the cells finished within it are stored, the others are left for ``--resume``.
The folder is created first (its parent must exist: a :class:`~optsched.sweep.store.StoreError`
before any workload loads otherwise). ``optsched sweep`` also locks the folder and records the
spec in ``_sweep.json`` around this call (:meth:`~optsched.sweep.store.SweepStore.claim`); a
caller of the API that resumes or shares folders does the same.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..budget import TimeBudget
from ..progress import Progress
from .cells import Cell, cell_error_rows, expand_cells, run_cell, workload_digest
from .spec import SweepSpec
from .store import SweepStore
from .workloads import load_workload

__all__ = ["Executor", "SweepResult", "SweepTimeUp", "Workloads", "load_workloads", "run_cells", "run_sweep"]


class Executor(Protocol):
    """What :class:`~optsched.sweep.executors.LocalPool` and ``RayExecutor`` provide."""

    def share(self, obj: Any) -> Any: ...
    def start(self) -> None: ...
    def submit(self, key: str, fn: Callable[..., Any], *args: Any) -> None: ...
    def next_done(self, timeout: float | None = None) -> tuple[str, Any, str | None] | None: ...
    def close(self) -> None: ...


class SweepTimeUp(Exception):
    """The sweep's time limit passed with cells still running or waiting (those finished are
    stored; ``--resume`` runs the others)."""

    def __init__(self, unfinished: int) -> None:
        super().__init__(f"time limit reached with {unfinished} cell(s) not finished")
        self.unfinished = unfinished


@dataclass
class Workloads:
    """The spec's base instances (in the driver), their digests and the executor's handles."""

    instances: list[Any]
    digests: list[str]
    handles: list[Any] = field(default_factory=list)


def load_workloads(spec: SweepSpec) -> Workloads:
    """Load every workload of the spec once (bad input raises SpecError before any work)."""
    instances = [load_workload(spec, k) for k in range(len(spec.workloads))]
    return Workloads(instances, [workload_digest(i) for i in instances])


@dataclass
class SweepResult:
    """What a sweep did: cells in the grid, already stored, run now, failed as a whole, and those
    not finished within the time limit (``--resume`` runs them)."""

    cells: int
    skipped: int
    ran: int
    failed: int
    wall_time: float
    unfinished: int = 0


def run_cells(
    cells: list[Cell],
    workloads: Workloads,
    executor: Executor,
    store: SweepStore,
    progress: Progress | None = None,
    budget: TimeBudget | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Run cells (those not stored yet), store each one's rows as it finishes; every cell's rows.

    A cell whose job failed as a whole (its worker died more often than the retries allow) is
    stored as ``error`` rows naming the failure. When ``budget`` runs out first, the cells
    finished are stored and :class:`SweepTimeUp` is raised (the caller closes the executor, which
    ends the cells still running).
    """
    budget = budget or TimeBudget()
    done = store.done_keys()
    by_key: dict[str, Cell] = {}
    rows: dict[str, list[dict[str, Any]]] = {}
    for cell in cells:
        if cell.key in done:
            rows[cell.key] = store.rows_of(cell.key)
        elif cell.key not in by_key:
            by_key[cell.key] = cell
            executor.submit(cell.key, run_cell, cell, workloads.handles[cell.workload_index])
    for finished in range(len(by_key)):
        done_now = executor.next_done(budget.left())
        if done_now is None:
            raise SweepTimeUp(len(by_key) - finished)
        key, result, error = done_now
        rows[key] = result if error is None else cell_error_rows(by_key[key], error)
        store.write(key, rows[key])
        if progress is not None:
            progress.advance()
    return rows


def run_sweep(
    spec: SweepSpec,
    out: str | Path,
    executor: Executor,
    *,
    workloads: Workloads | None = None,
    show_progress: bool | None = None,
    log: Callable[[str], None] | None = None,
    budget: TimeBudget | None = None,
) -> SweepResult:
    """Run every cell of ``spec`` not yet stored under ``out``, within ``budget``; see the module
    docstring."""
    t0 = time.perf_counter()
    say = log or (lambda msg: print(msg, file=sys.stderr))
    store = SweepStore(out)
    os.close(store.open_folder())  # a folder that cannot be made fails before any workload loads
    workloads = workloads or load_workloads(spec)
    cells = expand_cells(spec, workloads.digests)
    done = store.done_keys()
    todo = sum(1 for c in {c.key: c for c in cells}.values() if c.key not in done)
    say(f"sweep {spec.name}: {len(cells)} cells, {len(cells) - todo} already stored, {todo} to run")
    workloads.handles = [executor.share(i) for i in workloads.instances]
    executor.start()  # before the progress display's thread (a pool forks its workers while none runs)
    unfinished = 0
    with Progress("cells", todo, "cells", enabled=show_progress is not False) as progress:
        try:
            rows = run_cells(cells, workloads, executor, store, progress, budget)
        except SweepTimeUp as stop:
            unfinished = stop.unfinished
            rows = {key: store.rows_of(key) for key in store.done_keys()}
            say(f"sweep {spec.name}: {stop}; run it again with --resume to complete it")
    failed = sum(1 for r in rows.values() if r and all(x["status"] == "error" for x in r))
    ran = todo - unfinished
    return SweepResult(len(cells), len(cells) - todo, ran, failed, time.perf_counter() - t0, unfinished)
