"""Sweeps: grids of workloads, cost models, limits and rate scales, each cell's schedules replayed.

``optsched sweep`` (docs/sweep.md) in Python::

    from optsched.sweep import LocalPool, load_spec, run_sweep

    spec = load_spec("sweep.yaml")
    pool = LocalPool(workers=4)
    try:
        run_sweep(spec, "results/", pool)
    finally:
        pool.close()

Modules: :mod:`.spec` (the YAML/JSON specification, pydantic), :mod:`.workloads` (base instances
and each cell's overrides), :mod:`.cells` (the grid, content hashes, one cell's rows),
:mod:`.store` (the Parquet dataset), :mod:`.executors` (local process pool, Ray tasks),
:mod:`.runner` (a sweep), :mod:`.capacity` (largest rate meeting an SLO target),
:mod:`.replicas` (fewest engines per router), :mod:`.report` (the HTML page of ``sweep-report``).
"""

from .capacity import capacity_search, rate_grid
from .cells import COLUMNS, Cell, SloTarget, expand_cells, run_cell
from .executors import LocalPool, RayExecutor
from .replicas import replicas_search
from .runner import load_workloads, run_sweep
from .spec import SpecError, SweepSpec, load_spec, parse_spec
from .store import MissingDependency, SweepStore

__all__ = [
    "COLUMNS",
    "Cell",
    "LocalPool",
    "MissingDependency",
    "RayExecutor",
    "SloTarget",
    "SpecError",
    "SweepSpec",
    "SweepStore",
    "capacity_search",
    "expand_cells",
    "load_spec",
    "load_workloads",
    "parse_spec",
    "rate_grid",
    "replicas_search",
    "run_cell",
    "run_sweep",
]
