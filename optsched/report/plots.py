"""The report's pictures, one function per plot, each returning a matplotlib ``Figure``.

- :func:`plot_bounds_bars`: proven bounds, the solver's schedule and every policy on one axis;
- :func:`plot_timeline`: a Gantt chart of one schedule (requests x time, prefill vs decode, arrivals
  and evictions marked);
- :func:`plot_memory`: KV slots in use and running requests after each batch, against M and R_max;
- :func:`plot_latency_cdfs`: per-request TTFT and TPOT per schedule (empirical CDFs).

Times and KV come from :func:`optsched.schedule.replay` (``starts``, ``ends``, ``kv_used``,
``running``, ``outcomes``) and the phase of each item from :func:`optsched.schedule.item_phases`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from ..instance import Instance
from ..result import objective_named
from ..schedule import ReplayResult, Schedule, item_phases
from .gather import Report

__all__ = [
    "plot_bounds_bars",
    "plot_latency_cdfs",
    "plot_memory",
    "plot_timeline",
]

PREFILL, DECODE, EVICT, BOUND, BEST = "#4C72B0", "#DD8452", "#C44E52", "#55A868", "#222222"
#: Above this many batches, a request's consecutive batches of one phase are drawn as one bar.
MERGE_ABOVE = 300
#: Above this many drawn shapes a collection is rasterized inside the SVG (keeps files small).
RASTER_ABOVE = 4000


def _segments(instance: Instance, schedule: Schedule, result: ReplayResult, merge: bool) -> tuple[dict, dict, list]:
    """(start, end) runs per request and phase (consecutive batches merged when ``merge``), and
    eviction points (time, row)."""
    row = {r.id: k for k, r in enumerate(sorted(instance.requests, key=lambda r: (r.arrival, r.id)))}
    runs: dict[bool, dict[str, list[list[float]]]] = {True: {}, False: {}}
    last: dict[str, tuple[int, bool]] = {}
    evictions = []
    for j, (batch, phases) in enumerate(zip(schedule.batches, item_phases(instance, schedule))):
        s, e = result.starts[j], result.ends[j]
        for rid in batch.evict:
            evictions.append((s, row[rid]))
        for it, pre in zip(batch.items, phases):
            lst = runs[pre].setdefault(it.id, [])
            if merge and last.get(it.id) == (j - 1, pre) and lst:
                lst[-1][1] = e
            else:
                lst.append([s, e])
            last[it.id] = (j, pre)
    return row, runs, evictions


def plot_timeline(instance: Instance, schedule: Schedule, result: ReplayResult, title: str) -> Figure:
    """Gantt chart of a schedule: one row per request (by arrival), prefill and decode runs over time."""
    merge = len(schedule.batches) > MERGE_ABOVE
    row, runs, evictions = _segments(instance, schedule, result, merge)
    n = len(row)
    fig = Figure(figsize=(11, min(9.0, 2.2 + 0.12 * n)), layout="constrained")
    ax = fig.subplots()
    h = 0.8
    shapes = 0
    for pre, color in ((True, PREFILL), (False, DECODE)):
        verts = [
            [(s, row[rid] - h / 2), (s, row[rid] + h / 2), (e, row[rid] + h / 2), (e, row[rid] - h / 2)]
            for rid, segs in runs[pre].items()
            for s, e in segs
        ]
        shapes += len(verts)
        coll = PolyCollection(verts, facecolors=color, edgecolors="none" if merge else "white", linewidths=0.6)
        coll.set_rasterized(len(verts) > RASTER_ABOVE)
        ax.add_collection(coll)
    arrivals = sorted(instance.requests, key=lambda r: (r.arrival, r.id))
    ax.scatter(
        [r.arrival for r in arrivals],
        range(n),
        marker="|",
        s=20,
        color="#888888",
        linewidths=0.8,
        rasterized=n > RASTER_ABOVE,
    )
    if evictions:
        ax.scatter(
            [t for t, _ in evictions],
            [k for _, k in evictions],
            marker="X",
            s=60,
            color=EVICT,
            edgecolors="white",
            linewidths=0.6,
            zorder=3,
            rasterized=len(evictions) > RASTER_ABOVE,
        )
    makespan = result.ends[-1] if result.ends else 1.0
    ax.set_xlim(0, makespan * 1.01 if makespan > 0 else 1)
    ax.set_ylim(n - 0.5, -0.5)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("request (by arrival)")
    if n <= 40:
        ax.set_yticks(range(n), [r.id for r in arrivals], fontsize=7)
    ax.set_title(title, loc="left")
    ax.legend(
        handles=[
            Patch(color=PREFILL, label="prefill"),
            Patch(color=DECODE, label="decode"),
            Line2D([], [], marker="|", ls="", color="#888888", label="arrival"),
            Line2D([], [], marker="X", ls="", color=EVICT, label=f"eviction ({len(evictions)})"),
        ],
        loc="lower right",
        bbox_to_anchor=(1.0, 1.0),
        ncols=4,
        fontsize=8,
        frameon=False,
    )
    return fig


def _steps(result: ReplayResult, values: Sequence[int]) -> tuple[list[float], list[float]]:
    """(t, value) of a step function: each batch's value holds from its start to its end."""
    xs, ys = [], []
    for s, e, v in zip(result.starts, result.ends, values):
        xs += [s, e]
        ys += [v, v]
    return xs, ys


def plot_memory(report: Report, schedules: Sequence[tuple[str, ReplayResult]]) -> Figure:
    """KV slots used and running requests after each batch, per schedule, against M and R_max."""
    lim = report.instance.limits
    fig = Figure(figsize=(11, 6.5), layout="constrained")
    ax_kv, ax_run = fig.subplots(2, 1, sharex=True)
    cmap = matplotlib.colormaps["tab20"]
    for k, (label, res) in enumerate(schedules):
        style = {"color": BEST, "lw": 1.6, "zorder": 3} if k == 0 else {"color": cmap(k % 20), "lw": 0.8, "alpha": 0.85}
        ax_kv.plot(*_steps(res, res.kv_used), label=label, **style)
        ax_run.plot(*_steps(res, res.running), **style)
    if lim.kv_capacity is not None:
        ax_kv.axhline(lim.kv_capacity, color=EVICT, ls="--", lw=1.2, label=f"M = {lim.kv_capacity}")
    if lim.max_running is not None:
        ax_run.axhline(lim.max_running, color=EVICT, ls="--", lw=1.2, label=f"R_max = {lim.max_running}")
        ax_run.legend(loc="upper right", fontsize=8)
    ax_kv.set_ylabel("KV slots in use")
    ax_run.set_ylabel("running requests")
    ax_run.set_xlabel("time (s)")
    ax_kv.set_title("KV-cache use and running size after each batch")
    ax_kv.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, frameon=False)
    return fig


def plot_bounds_bars(report: Report) -> Figure:
    """Horizontal bars: proven comparable bounds, the solver's schedule, every policy (best bound line)."""
    rows: list[tuple[str, float, str]] = []
    for b in report.bounds:
        if b.comparable and math.isfinite(b.value):
            rows.append((
                f"bound {b.source}/{b.name}" + ("" if b.valid else " (unproven)"),
                b.value,
                BOUND if b.valid else "#BBBBBB",
            ))
    best = report.best
    for label, value, _, _ in sorted(report.candidates(), key=lambda c: c[1]):
        color = BEST if best is not None and label == best[0] else (PREFILL if label.startswith("solver") else DECODE)
        rows.append((label, value, color))
    fig = Figure(figsize=(11, 1.2 + 0.28 * max(len(rows), 1)), layout="constrained")
    ax = fig.subplots()
    ax.barh(range(len(rows)), [v for _, v, _ in rows], color=[c for *_, c in rows])
    ax.set_yticks(range(len(rows)), [label for label, *_ in rows], fontsize=8)
    ax.invert_yaxis()
    bound = report.best_bound
    if bound is not None:
        ax.axvline(bound.value, color=BOUND, ls="--", lw=1.2)
        for k, (_, v, _) in enumerate(rows):
            if bound.value > 0:
                ax.text(v, k, f" {v / bound.value:.3f}x", va="center", fontsize=7)
    ax.set_xlabel(f"{report.objective} ({objective_named(report.objective).unit})")
    ax.set_title("Lower bounds, best schedule (black) and policies; labels: ratio to the best bound")
    ax.margins(x=0.12)
    return fig


def _cdf(values: Sequence[float]) -> tuple[list[float], list[float]]:
    """Step points of the empirical CDF (share of values <= x)."""
    xs = sorted(values)
    n = len(xs)
    return xs, [(k + 1) / n for k in range(n)]


def plot_latency_cdfs(schedules: Sequence[tuple[str, ReplayResult]]) -> Figure:
    """Empirical CDFs of per-request TTFT and TPOT, one line per schedule (the first, the best, in black)."""
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    axes = fig.subplots(1, 2, sharey=True)
    colors = matplotlib.colormaps["tab20"].colors
    for ax, quantity in ((axes[0], "ttft"), (axes[1], "tpot")):
        positive: list[float] = []
        for k, (label, res) in enumerate(schedules):
            values = [v for o in res.outcomes.values() if (v := getattr(o, quantity)) is not None]
            if not values:
                continue
            positive += [v for v in values if v > 0]
            xs, ys = _cdf(values)
            best = k == 0
            ax.step(
                xs,
                ys,
                where="post",
                label=label,
                color=BEST if best else colors[k % len(colors)],
                linewidth=2.0 if best else 0.9,
                zorder=3 if best else 2,
            )
        for level in (0.5, 0.99):
            ax.axhline(level, color="#888888", linestyle=":", linewidth=0.8)
        if positive and max(positive) / min(positive) > 50:
            ax.set_xscale("log")
        else:
            ax.xaxis.set_major_locator(MaxNLocator(nbins=4))
        ax.set_xlabel(f"{quantity.upper()} (s)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("share of requests")
    axes[0].set_ylim(0, 1.01)
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside right center", fontsize=7, frameon=False)
    fig.suptitle("Per-request TTFT and TPOT per schedule (empirical CDF)")
    return fig
