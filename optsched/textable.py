"""Plain-text tables for the terminal, drawn with rich: a dashed rule under the header, cells
wrapped to a width, no colour codes; and the units of the schedule metrics."""

from __future__ import annotations

import io
import math
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from typing import Any

__all__ = ["format_value", "metric_pairs", "metric_unit", "render", "rule_under_head", "text_table"]


@cache
def rule_under_head() -> Any:
    """rich's SIMPLE_HEAD box in ASCII: a dashed rule under the header, nothing else."""
    from rich.box import Box  # rich loads where a table is drawn, not for the other helpers

    return Box("    \n    \n -- \n    \n    \n    \n    \n    \n", ascii=True)


def format_value(value: Any) -> str:
    """A cell: 6 significant digits, ``-`` for None, ``inf`` for infinities."""
    if value is None:
        return "-"
    if isinstance(value, float):
        if not math.isfinite(value):
            return "inf" if value > 0 else "-inf"
        return f"{value:.6g}"
    return str(value)


def text_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], width: int = 1000) -> str:
    """A plain-text table: numeric columns right-aligned, text left-aligned, cells wrapped to fit
    ``width`` columns."""
    from rich.table import Table

    raw = [list(row) for row in rows]
    table = Table(box=rule_under_head(), show_edge=False, pad_edge=False)
    for c, header in enumerate(headers):
        numeric = bool(raw) and all(isinstance(row[c], (int, float)) or row[c] is None for row in raw)
        table.add_column(header, justify="right" if numeric else "left", overflow="fold")
    for row in raw:
        table.add_row(*(format_value(v) for v in row))
    return render([table], width)


def metric_unit(key: str) -> tuple[str, float]:
    """(unit, factor from the metric's own unit) of a schedule metric key (optsched.metrics.Metrics):
    ms for TTFT, TPOT and queueing delay, s for latency and makespan, tok/s, req/s, % of requests;
    ("", 1) for counts and the G objective."""
    family = key.removeprefix("mean_").split("_")[0]
    if family in ("ttft", "tpot", "queue"):
        return "ms", 1e3
    if family in ("makespan", "latency", "total"):
        return "s", 1.0
    return {"throughput": ("tok/s", 1.0), "goodput": ("req/s", 1.0), "slo": ("%", 100.0)}.get(family, ("", 1.0))


def metric_pairs(metrics: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """(``key (unit)``, value in that unit) of each metric, for the commands' key-value listings."""
    out: list[tuple[str, Any]] = []
    for key, value in metrics.items():
        unit, scale = metric_unit(key)
        if isinstance(value, float) and scale != 1.0:
            value = value * scale
        out.append((f"{key} ({unit})" if unit else key, value))
    return out


def render(parts: Sequence[Any], width: int = 120) -> str:
    """Render rich renderables and plain lines as text ``width`` columns wide (no colour codes)."""
    from rich.console import Console

    buffer = io.StringIO()
    console = Console(file=buffer, width=width, color_system=None, highlight=False, soft_wrap=False)
    for part in parts:
        if isinstance(part, str):
            console.print(part, markup=False)
        else:
            console.print(part)
    return "\n".join(line.rstrip() for line in buffer.getvalue().rstrip("\n").split("\n"))
