"""``optsched sweep-report``: tables and plots of a stored sweep, as one self-contained HTML page.

The page (no JavaScript, no external resource; plots are inline SVG as in ``optsched report``):

- a summary (cells, rows by kind and status) and the rows that failed, with their errors;
- throughput against P99 TTFT per policy, one plot per workload, every replayed schedule of the
  grid a point, the Pareto front (no other point has both a lower P99 TTFT and a higher
  throughput) ringed and joined;
- capacity per configuration and policy (``--capacity`` rows) and fewest replicas per router
  (``--replicas`` rows), as tables and a bar chart;
- the gap to the cell's best proven bound, per cell and policy, as a table and a heat map.
"""

from __future__ import annotations

import html
import math
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from ..jsonio import write_text_atomic
from ..report.html import CSS, figure_svg
from .spec import LIMIT_AXES
from .store import SweepStore

__all__ = [
    "config_label",
    "load_rows",
    "pareto_front",
    "plot_pareto",
    "short_labels",
    "summary",
    "sweep_html",
    "write_sweep_html",
]

#: Rows with a replayed schedule.
SCHEDULE_KINDS = ("simulate", "solve")
_MAX_TABLE_ROWS = 300


def load_rows(folder: str | Path) -> list[dict[str, Any]]:
    """Every stored row of the sweep in ``folder``, in a stable order."""
    rows = SweepStore(folder).read().to_pylist()
    return sorted(
        rows,
        key=lambda r: (
            r["workload"] or "",
            config_label(r),
            r["rate_scale"] or 0.0,
            r["kind"] or "",
            r["policy"] or "",
        ),
    )


#: The contract's letters for the limits: M, C, P, R_max.
_LIMIT_LETTERS = {"kv_capacity": "M", "token_budget": "C", "prefill_budget": "P", "max_running": "R"}


def config_label(row: dict[str, Any]) -> str:
    """``cost_model M=.. C=.. P=.. R=..`` of a row: its configuration but the rate."""
    limits = " ".join(f"{_LIMIT_LETTERS[k]}={row[k]}" for k in LIMIT_AXES if row.get(k) is not None)
    return f"{row['cost_model']}" + (f" {limits}" if limits else "")


def _cell_label(row: dict[str, Any]) -> str:
    rate = row["rate_scale"]
    return (
        f"{row['workload']} | {config_label(row)} | rate x{rate:g}"
        if rate is not None
        else f"{row['workload']} | {config_label(row)}"
    )


#: The latency axis of the Pareto plots.
LATENCY = "ttft_p99"


def pareto_front(points: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points that no other point beats on both (lower x, higher y), by increasing x."""
    front: list[tuple[float, float]] = []
    for x, y in sorted(points, key=lambda p: (p[0], -p[1])):
        if not front or y > front[-1][1]:
            front.append((x, y))
    return front


def _schedules(rows: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    return [
        r
        for r in rows
        if r["kind"] in SCHEDULE_KINDS
        and r["status"] not in ("error", "invalid", "n/a")
        and r.get(key) is not None
        and r.get("throughput") is not None
        and math.isfinite(r["throughput"])
    ]


def plot_pareto(rows: list[dict[str, Any]], workload: str, key: str) -> Any:
    """Throughput against ``key`` per policy (log x axis when it spans a decade), the Pareto front,
    the SLO targets of ``key`` as dashed lines; the legend right of the axes, off the points."""
    fig = Figure(figsize=(10, 4.6), layout="constrained")
    ax = fig.subplots()
    by_policy: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in rows:
        by_policy[r["policy"]].append((r[key], r["throughput"]))
    for policy, pts in sorted(by_policy.items()):
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=22, label=policy, alpha=0.8)
    front = pareto_front(p for pts in by_policy.values() for p in pts)
    ax.plot([p[0] for p in front], [p[1] for p in front], color="black", lw=1, drawstyle="steps-post")
    ax.scatter(
        [p[0] for p in front], [p[1] for p in front], s=70, facecolors="none", edgecolors="black", label="Pareto front"
    )
    xs = [p[0] for pts in by_policy.values() for p in pts if p[0] > 0]
    targets = sorted({r["slo_ttft"] for r in rows if key.startswith("ttft") and r.get("slo_ttft") is not None})
    for target in targets[:3]:
        ax.axvline(target, color="#C44E52", ls="--", lw=1.2, label=f"SLO {target:g} s")
    if xs and max(xs) / min(xs) > 10:
        ax.set_xscale("log")
    ax.set_xlabel(f"{key.replace('_', ' ').upper()} (s)")
    ax.set_ylabel("throughput (tokens/s)")
    ax.set_title(workload)
    ax.grid(alpha=0.3)
    fig.legend(loc="outside right upper", fontsize=8, frameon=False)
    return fig


def _plot_bars(labels: list[str], values: list[float], xlabel: str) -> Any:
    fig = Figure(figsize=(7.5, 0.3 * len(labels) + 1.2), layout="constrained")
    ax = fig.subplots()
    ax.barh(range(len(labels)), values, color="#4c72b0")
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    return fig


def short_labels(parts: list[list[str]]) -> tuple[list[str], str]:
    """Labels made of the parts that differ between rows, and the parts all rows share
    (``" | "``-joined): ``[["w", "A", "vllm"], ["w", "A", "sarathi"]]`` -> ``(["vllm", "sarathi"], "w | A")``."""
    if not parts:
        return [], ""
    varying = [k for k in range(len(parts[0])) if len({p[k] for p in parts}) > 1]
    common = " | ".join(parts[0][k] for k in range(len(parts[0])) if k not in varying)
    return [" | ".join(p[k] for k in varying) or p[-1] for p in parts], common


def _plot_gaps(cells: list[str], policies: list[str], gaps: dict[tuple[str, str], float]) -> Any:
    import numpy as np

    grid = np.full((len(cells), len(policies)), np.nan)
    for (c, p), g in gaps.items():
        grid[cells.index(c), policies.index(p)] = 100 * g
    fig = Figure(figsize=(1.2 * len(policies) + 5, 0.28 * len(cells) + 1.6))
    ax = fig.subplots()
    image = ax.imshow(grid, aspect="auto", cmap="viridis_r", interpolation="nearest")
    ax.set_xticks(range(len(policies)), policies, rotation=30, ha="right", fontsize=8)
    ax.set_yticks(range(len(cells)), cells, fontsize=7)
    fig.colorbar(image, ax=ax, label="gap to the best proven bound (%)")
    fig.tight_layout()
    return fig


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts, the Pareto front per workload, capacities, replicas and gaps (the JSON output)."""
    key = LATENCY
    fronts = {}
    for workload in sorted({r["workload"] for r in rows}):
        scheds = _schedules([r for r in rows if r["workload"] == workload], key)
        front = set(pareto_front((r[key], r["throughput"]) for r in scheds))
        fronts[workload] = [
            {"policy": r["policy"], "cell": r["cell"], key: r[key], "throughput": r["throughput"]}
            for r in scheds
            if (r[key], r["throughput"]) in front
        ]
    gaps = [r["gap"] for r in rows if r["kind"] in SCHEDULE_KINDS and r["gap"] is not None]
    return {
        "cells": len({r["cell"] for r in rows if r["kind"] not in ("capacity", "replicas")}),
        "rows": len(rows),
        "by_kind_status": {
            f"{k}/{s}": n for (k, s), n in sorted(Counter((r["kind"], r["status"]) for r in rows).items())
        },
        "pareto": fronts,
        "capacity": [
            _pick(r, "policy", "rate_scale", "req_per_s", "tokens_per_s", "status")
            for r in rows
            if r["kind"] == "capacity"
        ],
        "replicas": [_pick(r, "policy", "rate_scale", "replicas", "status") for r in rows if r["kind"] == "replicas"],
        "max_gap": max(gaps) if gaps else None,
    }


def _pick(row: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {"workload": row["workload"], "configuration": config_label(row), **{k: row[k] for k in keys}}


def _num(value: Any, digits: int = 5) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "&ndash;"
    return f"{value:.{digits}g}" if isinstance(value, float) else html.escape(str(value))


def _table(headers: list[str], body: Iterable[list[Any]]) -> str:
    lines = list(body)
    out = ["<div class='scroll'><table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in headers) + "</tr>"]
    out += ["<tr>" + "".join(f"<td>{_num(v)}</td>" for v in row) + "</tr>" for row in lines[:_MAX_TABLE_ROWS]]
    out.append("</table></div>")
    if len(lines) > _MAX_TABLE_ROWS:
        out.append(f"<p class='note'>{len(lines) - _MAX_TABLE_ROWS} more rows in the dataset.</p>")
    return "".join(out)


def _figure(fig: Any, caption: str) -> str:
    return f"<figure>{figure_svg(fig)}<figcaption>{html.escape(caption)}</figcaption></figure>"


def _pareto_section(rows: list[dict[str, Any]]) -> list[str]:
    key = LATENCY
    if not _schedules(rows, key):
        return []
    parts = [f"<h2>Throughput against {key} per policy</h2>"]
    for workload in sorted({r["workload"] for r in rows}):
        scheds = _schedules([r for r in rows if r["workload"] == workload], key)
        if scheds:
            parts.append(
                _figure(
                    plot_pareto(scheds, workload, key),
                    f"{workload}: every replayed schedule of the grid; ringed and joined: the Pareto front.",
                )
            )
    return parts


def _capacity_section(rows: list[dict[str, Any]]) -> list[str]:
    parts = []
    caps = [r for r in rows if r["kind"] == "capacity"]
    if caps:
        parts.append(
            "<h2>Capacity per configuration</h2><p class='note'>Largest rate_scale whose replayed schedule "
            "meets the target quantile of TTFT and TPOT.</p>"
        )
        parts.append(
            _table(
                [
                    "workload",
                    "configuration",
                    "policy",
                    "capacity (rate_scale)",
                    "req/s",
                    "tokens/s",
                    "status",
                    "slo_ttft",
                    "slo_tpot",
                    "quantile",
                    "throughput",
                ],
                [
                    [
                        r["workload"],
                        config_label(r),
                        r["policy"],
                        r["rate_scale"],
                        r["req_per_s"],
                        r["tokens_per_s"],
                        r["status"],
                        r["slo_ttft"],
                        r["slo_tpot"],
                        r["attainment"],
                        r["throughput"],
                    ]
                    for r in caps
                ],
            )
        )
        found = [r for r in caps if r["rate_scale"] is not None]
        if found:
            labels, common = short_labels([[r["workload"], config_label(r), r["policy"]] for r in found])
            parts.append(
                _figure(
                    _plot_bars(labels, [r["rate_scale"] for r in found], "capacity (rate_scale)"),
                    "Capacity per configuration and policy" + (f" (all: {common})." if common else "."),
                )
            )
    reps = [r for r in rows if r["kind"] == "replicas"]
    if reps:
        parts.append("<h2>Fewest replicas per router</h2>")
        parts.append(
            _table(
                ["workload", "configuration", "rate_scale", "router", "replicas", "status", "attainment"],
                [
                    [
                        r["workload"],
                        config_label(r),
                        r["rate_scale"],
                        r["policy"],
                        r["replicas"],
                        r["status"],
                        r["attainment"],
                    ]
                    for r in reps
                ],
            )
        )
    return parts


def _gap_section(rows: list[dict[str, Any]]) -> list[str]:
    scheds = [r for r in rows if r["kind"] in SCHEDULE_KINDS and r["gap"] is not None]
    if not scheds:
        return []
    cells = sorted({_cell_label(r) for r in scheds})
    policies = sorted({r["policy"] for r in scheds})
    gaps = {(_cell_label(r), r["policy"]): r["gap"] for r in scheds}
    bounds = {_cell_label(r): r["bound"] for r in scheds}
    parts = [
        "<h2>Gap to the proven bound per cell</h2><p class='note'>gap = (objective &minus; best proven "
        "bound of the cell) / objective.</p>"
    ]
    parts.append(
        _table(
            ["cell", "best bound", *policies],
            [
                [c, bounds[c], *(f"{100 * gaps[(c, p)]:.2f}%" if (c, p) in gaps else None for p in policies)]
                for c in cells
            ],
        )
    )
    if len(cells) <= 120:
        parts.append(_figure(_plot_gaps(cells, policies, gaps), "Gap per cell and policy (blank: not run or failed)."))
    return parts


def sweep_html(rows: list[dict[str, Any]], title: str) -> str:
    """The page as an HTML string."""
    e = html.escape
    info = summary(rows)
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>optsched sweep: {e(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>optsched sweep: {e(title)}</h1>",
        f"<p>{info['cells']} cells, {info['rows']} rows. Every schedule was replayed under the contract's "
        "semantics before its metrics were stored.</p>",
        _table(["kind/status", "rows"], [[k, n] for k, n in info["by_kind_status"].items()]),
    ]
    parts += _pareto_section(rows) + _capacity_section(rows) + _gap_section(rows)
    failed = [r for r in rows if r["status"] in ("error", "invalid")]
    if failed:
        parts.append("<h2>Failed rows</h2>")
        parts.append(
            _table(
                ["cell", "kind", "policy", "status", "error"],
                [[_cell_label(r), r["kind"], r["policy"], r["status"], r["error"]] for r in failed],
            )
        )
    parts.append(
        "<p class='note'>Generated by optsched sweep-report. No scripts, no external resources.</p></body></html>"
    )
    return "\n".join(parts)


def write_sweep_html(rows: list[dict[str, Any]], title: str, path: str | Path) -> None:
    """Write the page atomically."""
    write_text_atomic(path, sweep_html(rows, title))
