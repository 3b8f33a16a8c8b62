"""A :class:`~optsched.report.records.Report` as terminal tables, drawn with rich.

Every header carries its unit: TTFT, TPOT and queueing delay in milliseconds, latency and makespan
in seconds, throughput in output tokens per second, goodput in requests per second. The default
column set (:data:`DEFAULT_COLUMNS`) fits 120 columns; ``columns`` picks others (:data:`COLUMNS`
lists every one). Schedules whose batches are identical are folded into one row
(``vllm = vllm-ef``); the bounds listed are those of the report's objective that are compared
(:attr:`~optsched.report.records.BoundEntry.comparable`), the others and the notes of bounders that
do not apply or were not run only when ``verbose``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from rich.table import Table

from ..result import objective_named
from ..schedule import Schedule
from ..textable import render, rule_under_head
from .output import HIGHLIGHTED_POLICIES, grouped_messages, report_rows
from .records import Report

__all__ = [
    "COLUMNS",
    "DEFAULT_COLUMNS",
    "objective_unit",
    "Column",
    "fold_identical",
    "folded_rows",
    "gap_rule",
    "parse_columns",
    "same_batches",
    "report_table",
    "report_terminal",
]


@dataclass(frozen=True)
class Column:
    """One metric column: its header (with the unit), the factor from the metric's unit, digits."""

    header: str
    scale: float = 1.0
    digits: int = 4


#: Every metric column of the schedule table, by metric key (optsched.metrics.Metrics).
COLUMNS: dict[str, Column] = {
    "makespan": Column("makespan\ns", digits=6),
    "mean_latency": Column("latency\nmean s"),
    "latency_p50": Column("latency\nP50 s"),
    "latency_p90": Column("latency\nP90 s"),
    "latency_p99": Column("latency\nP99 s"),
    "mean_ttft": Column("TTFT\nmean ms", 1e3),
    "ttft_p50": Column("TTFT\nP50 ms", 1e3),
    "ttft_p90": Column("TTFT\nP90 ms", 1e3),
    "ttft_p99": Column("TTFT\nP99 ms", 1e3),
    "mean_tpot": Column("TPOT\nmean ms", 1e3),
    "tpot_p50": Column("TPOT\nP50 ms", 1e3),
    "tpot_p90": Column("TPOT\nP90 ms", 1e3),
    "tpot_p99": Column("TPOT\nP99 ms", 1e3),
    "queue_p50": Column("queue\nP50 ms", 1e3),
    "queue_p99": Column("queue\nP99 ms", 1e3),
    "throughput": Column("output\ntok/s"),
    "goodput": Column("goodput\nreq/s"),
    "slo_attainment": Column("SLO\nmet %", 100.0),
    "evictions": Column("evic-\ntions"),
    "batches": Column("batches"),
}

#: The columns shown by default (the objective's own column comes first in any case).
DEFAULT_COLUMNS = ("latency_p99", "ttft_p50", "ttft_p99", "tpot_p99", "queue_p99", "throughput", "goodput")


#: Unit of each objective's value (as printed beside it).
def objective_unit(name: str) -> str:
    """The unit of objective ``name`` (:data:`optsched.result.OBJECTIVE_TABLE`); empty when unknown."""
    try:
        return objective_named(name).unit
    except ValueError:
        return ""


def parse_columns(text: str | None, wide: bool = False) -> tuple[str, ...]:
    """The column keys of ``--columns A,B`` (``all``: every one), or of ``--wide``, or the default.

    Raises
    ------
    ValueError
        On an unknown column (the message lists the known ones), or on both ``--columns`` and ``--wide``.
    """
    if wide and text is not None:
        raise ValueError("--columns: not with --wide (--wide shows every column, as --columns all); give one")
    if wide or (text is not None and text.strip() == "all"):
        return tuple(COLUMNS)
    if text is None:
        return DEFAULT_COLUMNS
    keys = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = [k for k in keys if k not in COLUMNS]
    if unknown or not keys:
        what = f"unknown column {unknown[0]!r}" if unknown else "no column given"
        raise ValueError(f"--columns: {what} (known: all, {', '.join(COLUMNS)})")
    return keys


def same_batches(a: Schedule, b: Schedule) -> bool:
    """Whether two schedules run the same batches: the same start, evictions and items in each,
    up to the order of the items (and evictions) within a batch, which the semantics ignore.

    Compared on the schedules' columns (:meth:`~optsched.schedule.Schedule.columns`): the same rows
    in the same order, else each batch's token count, else each batch's rows sorted by (request,
    tokens); no batch objects are built."""
    x, y = a.columns(), b.columns()
    if x.n_batches != y.n_batches or len(x.item_ref) != len(y.item_ref) or len(x.evict_ref) != len(y.evict_ref):
        return False
    if not np.array_equal(x.start, y.start, equal_nan=True):
        return False
    if not (np.array_equal(x.item_ptr, y.item_ptr) and np.array_equal(x.evict_ptr, y.evict_ptr)):
        return False
    index = {rid: k for k, rid in enumerate(x.ids)}
    if any(rid not in index for rid in y.ids):
        return False
    y_items, y_evicts = y.refs_in(index)
    in_order = np.array_equal(x.item_ref, y_items) and np.array_equal(x.item_tokens, y.item_tokens)
    if in_order and np.array_equal(x.evict_ref, y_evicts):  # the same rows in the same order
        return True
    if len(x.item_tokens) and not np.array_equal(
        np.add.reduceat(x.item_tokens, x.item_ptr[:-1][np.diff(x.item_ptr) > 0]),
        np.add.reduceat(y.item_tokens, y.item_ptr[:-1][np.diff(y.item_ptr) > 0]),
    ):  # a batch's tokens differ
        return False
    pairs = [
        (_sorted_rows(x.item_ptr, x.item_ref, x.item_tokens), _sorted_rows(y.item_ptr, y_items, y.item_tokens)),
        (_sorted_rows(x.evict_ptr, x.evict_ref), _sorted_rows(y.evict_ptr, y_evicts)),
    ]
    return all(np.array_equal(p, q) for rows_x, rows_y in pairs for p, q in zip(rows_x, rows_y))


def _sorted_rows(ptr: np.ndarray, ref: np.ndarray, tokens: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    """The rows of every batch (``ptr``: each batch's first row) sorted by (batch, request, tokens):
    the columns ``ref`` (and ``tokens``) in that order."""
    batch = np.repeat(np.arange(len(ptr) - 1), np.diff(ptr))
    keys = (ref,) if tokens is None else (tokens, ref)
    order = np.lexsort((*keys, batch))
    return tuple(k[order] for k in keys)


def fold_identical(report: Report) -> dict[str, list[str]]:
    """Schedule labels (``kind:name``) grouped by identical batches (:func:`same_batches`).

    Each group is keyed by its first label: the solver's, else a policy of
    :data:`~optsched.report.gather.HIGHLIGHTED_POLICIES`, else the first in
    :func:`~optsched.report.output.report_rows` order; it maps to every label of the group, the key first.
    """
    order = [f"{r['kind']}:{r['name']}" for r in report_rows(report)]
    candidates = report.candidates()
    schedules = {c[0]: c[2] for c in candidates}
    values = {c[0]: c[1] for c in candidates}
    groups: dict[str, list[str]] = {}
    keys: list[tuple[str, int, float]] = []  # (head label, batch count, objective): cheap pre-checks
    for label in order:
        schedule = schedules.get(label)
        if schedule is None:
            continue
        value, count = values[label], schedule.columns().n_batches
        for head, head_count, head_value in keys:
            if head_count == count and head_value == value and same_batches(schedules[head], schedule):
                groups[head].append(label)
                break
        else:
            keys.append((label, count, value))
            groups[label] = [label]
    out: dict[str, list[str]] = {}
    for members in groups.values():
        members.sort(key=_label_rank)
        out[members[0]] = members
    return out


def _label_rank(label: str) -> tuple[int, int]:
    kind, name = label.split(":", 1)
    if kind == "solver":
        return 0, 0
    if name in HIGHLIGHTED_POLICIES:
        return 1, HIGHLIGHTED_POLICIES.index(name)
    return 2, 0


def _fmt(value: Any, column: Column | None = None, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return "inf" if value > 0 else "-inf"
        if column is not None:
            value, digits = value * column.scale, column.digits
        if abs(value) >= 10**digits:
            return f"{value:.0f}"
        return f"{value:.{digits}g}"
    return str(value)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _bounds_table(report: Report, verbose: bool) -> Table:
    unit = objective_unit(report.objective)
    table = Table(box=rule_under_head(), show_edge=False, pad_edge=False, title_justify="left")
    for name, kw in (("source", {}), ("bound", {}), (f"value {unit}".strip(), {"justify": "right"}), ("proven", {})):
        table.add_column(name, **kw)
    if verbose:
        table.add_column("compared")
        table.add_column("note", overflow="fold")
    for b in report.bounds:
        if not (verbose or (b.comparable and b.objective == report.objective)):
            continue
        cells = [b.source, b.name, _fmt(b.value, digits=6), _fmt(b.valid)]
        table.add_row(*cells, *((_fmt(b.comparable), b.note) if verbose else ()))
    return table


def folded_rows(report: Report) -> Iterator[tuple[dict[str, Any], list[str]]]:
    """Each row of :func:`report_rows` that heads its group of identical schedules
    (:func:`fold_identical`), with the group's labels (its own first)."""
    groups = fold_identical(report)
    folded = {label for members in groups.values() for label in members[1:]}
    for row in report_rows(report):
        label = f"{row['kind']}:{row['name']}"
        if label not in folded:
            yield row, groups.get(label, [label])


def gap_rule(report: Report) -> str:
    """How the report's gaps are computed, in words (the sense of its objective)."""
    return "(best bound - value) / best bound" if report.maximised else "(value - best bound) / value"


def _schedule_table(report: Report, columns: Sequence[str]) -> Table:
    objective = report.objective
    unit = objective_unit(objective)
    shown = [k for k in columns if k != objective]
    table = Table(box=rule_under_head(), show_edge=False, pad_edge=False)
    table.add_column("schedule", overflow="fold", ratio=1, min_width=16)
    table.add_column(f"{objective}\n{unit}".strip(), justify="right", no_wrap=True)
    table.add_column("gap\n%", justify="right", no_wrap=True)
    for key in shown:
        table.add_column(COLUMNS[key].header, justify="right", no_wrap=True)
    for row, members in folded_rows(report):
        shown_label = " = ".join([members[0], *(m.split(":", 1)[1] for m in members[1:])])
        if row["kind"] == "solver":
            shown_label += f" [{row['status']}]"
        m = row["metrics"] or {}
        value = _fmt(row["objective"], digits=6) if row["objective"] is not None else row["status"]
        gap = "-" if row["gap"] is None else f"{100 * row['gap']:.1f}"
        table.add_row(shown_label, value, gap, *(_fmt(m.get(k), COLUMNS[k]) for k in shown))
    return table


def report_terminal(report: Report, columns: Sequence[str] = DEFAULT_COLUMNS, verbose: bool = False) -> list[Any]:
    """The report as a list of rich renderables and text lines (see :func:`render`)."""
    inst = report.instance
    lim = inst.limits
    unit = objective_unit(report.objective)
    out: list[Any] = [
        f"instance {inst.name}: {len(inst.requests)} requests, cost model {inst.cost_model.name}, "
        f"C={lim.token_budget} P={lim.prefill_budget} M={_fmt(lim.kv_capacity)} R_max={_fmt(lim.max_running)}",
        f"objective: {report.objective} ({unit})" + ("   (PARTIAL REPORT)" if report.partial else ""),
        "",
        f"{'Upper' if report.maximised else 'Lower'} bounds on the {report.objective}"
        + ("" if verbose else " (every bound: --verbose)"),
        _bounds_table(report, verbose),
    ]
    best_bound = report.best_bound
    if best_bound is not None:
        out.append(f"best proven bound: {best_bound.value:.6g} {unit} ({best_bound.source}/{best_bound.name})")
    if report.tail_bounds:
        tails = ", ".join(f"{k} >= {1000 * v:.4g} ms" for k, v in report.tail_bounds.items() if v is not None)
        out.append(f"every schedule's {tails} (proven, infermax/goodput_bounds.py)")
    out += [
        "",
        f"Schedules (each replayed; gap = {gap_rule(report)}; a = b: the same batches)",
        _schedule_table(report, columns),
    ]
    best = report.best
    if best is not None:
        gap = report.gap(best[1])
        proof = (
            f", proven optimal by {best_bound.source}/{best_bound.name}" if report.proven_optimal and best_bound else ""
        )
        out.append(f"best schedule: {best[0]} with {report.objective} {best[1]:.6g} {unit} (gap {_pct(gap)}{proof})")
    for message, names in grouped_messages(report_rows(report)):
        out.append(f"  {', '.join(names)}: {message}")
    for note in report.notes:
        if verbose or not note.startswith("bounder "):
            out.append(f"note: {note}")
    return out


def report_table(
    report: Report, columns: Sequence[str] = DEFAULT_COLUMNS, verbose: bool = False, width: int = 120
) -> str:
    """The report as plain text ``width`` columns wide: bounds, then schedules with their gaps."""
    return render(report_terminal(report, columns, verbose), width)
