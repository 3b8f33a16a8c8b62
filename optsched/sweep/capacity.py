"""Capacity search: per configuration and policy, the largest ``rate_scale`` meeting an SLO target.

The rates searched form a geometric grid from ``capacity.low`` to ``capacity.high`` with ratio
``1 + capacity.tolerance`` (:func:`rate_grid`), so the answer is exact on that grid: the stated
tolerance is relative. A probe at grid point k is a cell running one policy at ``rate_grid[k]``
whose schedule (replayed) meets the target when the ``attainment`` quantile of TTFT and of TPOT
are within their limits (:class:`~optsched.sweep.cells.SloTarget`).

Every search first probes both ends (``below_range`` when the low end fails, ``above_range``
when the high end meets), then narrows ``good < bad`` (a meeting and a failing point) by
multisection: each round probes up to ``slots // searches`` evenly spaced points inside every
open interval, all searches' probes running at once on the executor, until ``bad = good + 1``; then
it probes the neighbours ``good - 1`` and ``bad + 1`` (:attr:`_Search.neighbours`), and a neighbour
that contradicts the bracket reopens it. Monotonicity is not assumed silently: every failing point
below a meeting one is reported (:attr:`_Search.non_monotone`). Searches cover the policies of
``run.simulate`` and the solves of ``run.solve``; :mod:`.ceiling` adds the proven ceiling of each
configuration. Probes are cells: stored as they finish, reused on ``--resume`` and by other
searches that need the same point.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import time
from dataclasses import dataclass, field
from typing import Any

from ..budget import TimeBudget
from ..progress import Progress
from .ceiling import ceiling_rows, steady_state_warning, throughputs
from .cells import METRIC_COLUMNS, Cell, SloTarget, expand_cells, make_row
from .runner import Executor, SweepTimeUp, Workloads, run_cells
from .spec import LIMIT_AXES, RunSpec, SpecError, SweepSpec
from .store import SweepStore

__all__ = ["capacity_search", "check_capacity_spec", "rate_grid"]


#: Row statuses of a cell that produced a replayed schedule (a policy's, or a solve's).
SCHEDULE_OK = ("ok", "optimal", "feasible", "time_limit")


def rate_grid(low: float, high: float, tolerance: float) -> list[float]:
    """``low * (1 + tolerance)^k`` for k = 0, 1, ... below ``high``, then ``high``."""
    steps = math.ceil(math.log(high / low) / math.log1p(tolerance) - 1e-9)
    return [low * (1 + tolerance) ** k for k in range(steps)] + [high]


@dataclass
class RateSearch:
    """One configuration and policy: ``probes`` maps grid index -> met."""

    cells: list[Cell]
    key: str
    good: int = -1
    bad: int = -1
    probes: dict[int, bool] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        ends = 0 in self.probes and len(self.cells) - 1 in self.probes
        bracketed = self.bad == self.good + 1 and not self.neighbours
        return ends and (not self.probes[0] or self.probes[len(self.cells) - 1] or bracketed)

    @property
    def neighbours(self) -> list[int]:
        """The grid points next to the bracket not probed yet (below the good, above the bad one)."""
        around = (self.good - 1, self.bad + 1)
        return [k for k in around if 0 <= k < len(self.cells) and k not in self.probes]

    @property
    def non_monotone(self) -> list[int]:
        """Grid points that fail although a higher rate meets the target."""
        met = [k for k, m in self.probes.items() if m]
        return sorted(k for k, m in self.probes.items() if not m and met and k < max(met))

    @property
    def resolved(self) -> int:
        """Grid points whose outcome is known: probed, or implied (every point up to ``good``
        meets, every point from ``bad`` on fails); ``len(cells)`` once :attr:`done`."""
        last = len(self.cells) - 1
        if 0 not in self.probes or last not in self.probes:
            return len(self.probes)
        known = set(self.probes) | set(range(self.good + 1)) | set(range(max(self.bad, 0), last + 1))
        return len(known)

    def next_points(self, count: int) -> list[int]:
        last = len(self.cells) - 1
        if 0 not in self.probes or last not in self.probes:
            return [k for k in (0, last) if k not in self.probes]
        if self.bad == self.good + 1:
            return self.neighbours
        span = self.bad - self.good
        return sorted({self.good + max(1, round(j * span / (count + 1))) for j in range(1, count + 1)} - {self.bad})

    def record(self, k: int, met: bool) -> None:
        self.probes[k] = met
        last = len(self.cells) - 1
        if 0 in self.probes and last in self.probes:
            self.bad = min([j for j, m in self.probes.items() if not m], default=last + 1)
            self.good = max([j for j, m in self.probes.items() if m and j < self.bad], default=-1)


def check_capacity_spec(spec: SweepSpec) -> None:
    """Raise :class:`SpecError` when ``spec`` cannot drive a capacity search (before any work)."""
    if not spec.run.simulate and not spec.run.solve:
        raise SpecError(f"{spec.source}: run: --capacity searches the rate of each policy and solver; list some")
    if spec.run.bounds:
        raise SpecError(
            f"{spec.source}: run.bound: --capacity computes its own proven ceiling; remove run.bound "
            "(run it in a plain sweep)"
        )
    if spec.rate_scale != [1.0]:
        raise SpecError(
            f"{spec.source}: rate_scale: --capacity chooses the rate itself; "
            "give its range as capacity: {low, high, tolerance}"
        )


def _search_key(first: Cell, spec: SweepSpec, target: SloTarget) -> str:
    payload = {"probe": first.key, "capacity": spec.capacity.model_dump(), "target": dataclasses.asdict(target)}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:32]


def _searches(spec: SweepSpec, workloads: Workloads, target: SloTarget) -> list[RateSearch]:
    grid = rate_grid(spec.capacity.low, spec.capacity.high, spec.capacity.tolerance)
    out = []
    runs = [RunSpec(simulate=[policy], objective=spec.run.objective) for policy in spec.run.simulate]
    runs += [RunSpec(solve=[entry], objective=spec.run.objective) for entry in spec.run.solve]
    for run in runs:
        cells = expand_cells(spec, workloads.digests, run, grid, target)
        for start in range(0, len(cells), len(grid)):  # the grid is the innermost axis
            chunk = cells[start : start + len(grid)]
            out.append(RateSearch(chunk, _search_key(chunk[0], spec, target)))
    return out


def _result_row(search: RateSearch, rows: dict[str, list[dict[str, Any]]], base: Any) -> dict[str, Any]:
    """The capacity row of a finished search; ``base`` is its workload at rate scale 1."""
    last = len(search.cells) - 1
    status = "below_range" if not search.probes[0] else "above_range" if search.probes[last] else "ok"
    at = search.cells[search.good] if search.good >= 0 else search.cells[0]
    probe = rows[at.key][0]
    row = {
        **probe,
        "kind": "capacity",
        "cell": search.key,
        "status": status,
        "wall_time": sum(rows[search.cells[k].key][0]["wall_time"] or 0.0 for k in search.probes),
    }
    if search.good < 0:  # nothing meets the target: no capacity, no metrics to report
        row.update(dict.fromkeys([*METRIC_COLUMNS, "objective", "error"]), rate_scale=None, slo_met=False)
    row["req_per_s"], row["tokens_per_s"] = throughputs(base, row["rate_scale"])
    return row


def _search_policy(search: RateSearch) -> str:
    """The schedule source a search probes: its policy, or ``solver:PROBLEM``."""
    run = search.cells[0].run
    return run.simulate[0] if run.simulate else f"solver:{run.solve[0].problem}"


def _unfinished_row(search: RateSearch, rows: dict[str, list[dict[str, Any]]], base: Any) -> dict[str, Any]:
    """The summary row of a search the time limit cut short: the highest rate found to meet the
    target so far with its probe's metrics (rate null when none was), status ``time_limit``;
    ``base`` is its workload at rate scale 1."""
    if search.good >= 0:
        row = {**rows[search.cells[search.good].key][0], "kind": "capacity", "cell": search.key}
    else:
        row = make_row(search.cells[0], None, kind="capacity", policy=_search_policy(search), rate_scale=None)
    row["req_per_s"], row["tokens_per_s"] = throughputs(base, row["rate_scale"])
    return {**row, "status": "time_limit"}


def capacity_search(
    spec: SweepSpec,
    workloads: Workloads,
    executor: Executor,
    store: SweepStore,
    target: SloTarget,
    *,
    slots: int = 1,
    show_progress: bool | None = None,
    budget: TimeBudget | None = None,
) -> dict[str, Any]:
    """Run every capacity search of the spec (see the module docstring); a summary for the CLI.

    Each search's result is stored as a ``kind = capacity`` row: the policy, ``rate_scale`` = the
    capacity (null when even the low end fails), ``status`` (``ok``, ``below_range``,
    ``above_range``) and the metrics of the probe at the capacity. When ``budget`` runs out, the
    searches not done are summarised (not stored) with status ``time_limit`` and the highest rate
    found to meet the target so far (a lower bound on the capacity), and the proven ceilings not
    yet stored are left out; ``--resume`` goes on from the probes stored.
    """
    budget = budget or TimeBudget()
    t0 = time.perf_counter()
    check_capacity_spec(spec)
    searches = _searches(spec, workloads, target)
    stored_before = store.done_keys()
    active = [s for s in searches if s.key not in stored_before]
    workloads.handles = [executor.share(i) for i in workloads.instances]
    executor.start()  # before the progress display's thread (a pool forks its workers while none runs)
    # a fixed total: every rate of every search, resolved when probed or implied by monotonicity
    progress = Progress("rates", sum(len(s.cells) for s in active), "rates", enabled=show_progress is not False)
    seen: dict[str, list[dict[str, Any]]] = {}
    try:
        while active:
            per = max(1, slots // len(active))
            wanted = {s.key: s.next_points(per) for s in active}
            cells = [s.cells[k] for s in active for k in wanted[s.key]]
            progress.doing(f"{len(cells)} probe(s) of {len(active)} search(es)")
            seen.update(run_cells(cells, workloads, executor, store, budget=budget))
            for s in active:
                for k in wanted[s.key]:
                    row = seen[s.cells[k].key][0]
                    s.record(k, row["status"] in SCHEDULE_OK and bool(row["slo_met"]))
                if s.done:
                    store.write(s.key, [_result_row(s, seen, workloads.instances[s.cells[0].workload_index])])
            progress.set_done(sum(s.resolved for s in searches if s.key not in stored_before))
            active = [s for s in active if not s.done]
    except SweepTimeUp:
        pass
    finally:
        progress.close()
    stored = store.done_keys()
    results = [
        store.rows_of(s.key)[0]
        if s.key in stored
        else _unfinished_row(s, seen, workloads.instances[s.cells[0].workload_index])
        for s in searches
    ]
    results += _ceilings(spec, workloads, store, target, budget)
    bases = {entry.label: workloads.instances[w] for w, entry in enumerate(spec.workloads)}
    warnings = [w for r in results if (w := _warning(r, bases[r["workload"]], target)) is not None]
    return {
        "searches": len(searches),
        "already_stored": sum(1 for s in searches if s.key in stored_before),
        "unfinished": sum(1 for s in searches if s.key not in stored),
        "probes": len(seen),
        "wall_time": time.perf_counter() - t0,
        "capacity": [_summary(r) for r in results],
        "non_monotone": {
            _search_policy(s): [s.cells[k].rate_scale for k in s.non_monotone] for s in searches if s.non_monotone
        },
        "warnings": warnings,
    }


def _warning(row: dict[str, Any], base: Any, target: SloTarget) -> str | None:
    """:func:`.ceiling.steady_state_warning` for a policy's capacity found inside the range."""
    if row["status"] != "ok" or row["policy"] == "ceiling" or row["policy"].startswith("solver:"):
        return None
    if row["cost_model"] != base.cost_model.name or any(row[k] != getattr(base.limits, k) for k in LIMIT_AXES):
        return None  # another configuration than the workload's own: not re-simulated here
    warning = steady_state_warning(base, row["policy"], row["rate_scale"], target)
    return None if warning is None else f"{row['workload']}: {warning}"


SUMMARY_KEYS = (
    "workload",
    "cost_model",
    "kv_capacity",
    "token_budget",
    "prefill_budget",
    "max_running",
    "policy",
    "rate_scale",
    "status",
    "req_per_s",
    "tokens_per_s",
)


def _summary(row: dict[str, Any]) -> dict[str, Any]:
    """A capacity row for the CLI: its configuration, rate scale, requests/s and tokens/s."""
    return {k: row[k] for k in SUMMARY_KEYS}


def _ceilings(
    spec: SweepSpec, workloads: Workloads, store: SweepStore, target: SloTarget, budget: TimeBudget
) -> list[dict[str, Any]]:
    """The proven ceiling row of every configuration (:mod:`.ceiling`), stored (and reused) as cells;
    none is computed once ``budget`` has run out."""
    grid = rate_grid(spec.capacity.low, spec.capacity.high, spec.capacity.tolerance)
    cells = expand_cells(spec, workloads.digests, RunSpec(objective=spec.run.objective), grid, target)
    out = []
    for start in range(0, len(cells), len(grid)):
        chunk = cells[start : start + len(grid)]
        key = "ceiling-" + _search_key(chunk[0], spec, target)
        if key not in store.done_keys():
            if budget.expired():
                continue
            store.write(key, [{**row, "cell": key} for row in ceiling_rows([chunk], workloads.instances, target)])
        out.append(store.rows_of(key)[0])
    return out
