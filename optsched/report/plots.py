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

import bisect
import math
from collections.abc import Sequence

import matplotlib
import numpy as np
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from ..instance import Instance
from ..result import objective_named
from ..schedule import Batch, Item, ReplayResult, Schedule, item_phases
from .records import Report

__all__ = [
    "busiest_window",
    "color_key",
    "plot_bounds_bars",
    "plot_latency_cdfs",
    "plot_memory",
    "plot_timeline",
    "schedule_color",
    "timeline_segments",
]


def schedule_color(label: str, best: str | None) -> str:
    """The colour of a schedule (``kind:name``): black for the best, its own for the solver and
    the engines' defaults (:data:`HIGHLIGHT`), grey for the other policies."""
    if label == best:
        return BEST
    kind, name = label.split(":", 1)
    return HIGHLIGHT.get("solver" if kind == "solver" else name, OTHER)


def color_key(labels: Sequence[str], best: str | None) -> str:
    """A caption's colour key for the schedules drawn: ``black: ...; blue: ...; grey: ...``."""
    names = {BEST: "black", HIGHLIGHT["vllm"]: "blue", HIGHLIGHT["sarathi"]: "purple", HIGHLIGHT["solver"]: "cyan"}
    groups: dict[str, list[str]] = {}
    for label in labels:
        groups.setdefault(schedule_color(label, best), []).append(label)
    parts = [f"{names[c]}: {', '.join(groups[c])}" for c in names if c in groups]
    if OTHER in groups:
        parts.append(f"grey: the other {len(groups[OTHER])} polic{'y' if len(groups[OTHER]) == 1 else 'ies'}")
    return "; ".join(parts)


PREFILL, DECODE, EVICT, BOUND, BEST = "#4C72B0", "#DD8452", "#C44E52", "#55A868", "#222222"
#: Colours of the highlighted schedules (the best is :data:`BEST`), by policy or kind; others: :data:`OTHER`.
HIGHLIGHT = {"vllm": "#1F77B4", "sarathi": "#9467BD", "solver": "#17BECF"}
OTHER = "#BBBBBB"
#: Most rows of a timeline: above, the busiest window of this many consecutive requests is drawn.
TIMELINE_ROWS = 300
#: The quantiles marked on the CDFs' tail-zoomed (logit) axis.
CDF_TICKS = (0.1, 0.5, 0.9, 0.99, 0.999)
#: Above this many batches, a request's consecutive batches of one phase are drawn as one bar.
MERGE_ABOVE = 300
#: Above this many drawn shapes a collection is rasterized inside the SVG (keeps files small).
RASTER_ABOVE = 4000


def timeline_segments(
    instance: Instance, schedule: Schedule, result: ReplayResult, merge: bool, keep: set[str] | None = None
) -> tuple[dict, dict, list]:
    """(start, end) runs per request and phase (consecutive batches merged when ``merge``), and
    eviction points (time, row); only the requests of ``keep`` (None: all), read from the batches
    between the first arrival and the last finish among them (their phases are exact: none of them
    has work before its arrival)."""
    row = {r.id: k for k, r in enumerate(sorted(instance.requests, key=lambda r: (r.arrival, r.id)))}
    if keep is None:
        first, batches = 0, schedule.batches
    else:
        lo = min(r.arrival for r in instance.requests if r.id in keep)
        finishes = [result.outcomes[rid].finish for rid in keep]
        hi = max((f for f in finishes if f is not None), default=math.inf)
        first, last = bisect.bisect_right(result.ends, lo), bisect.bisect_right(result.starts, hi)
        batches = window_batches(schedule, first, last, keep)
    runs: dict[bool, dict[str, list[list[float]]]] = {True: {}, False: {}}
    previous: dict[str, tuple[int, bool]] = {}
    evictions = []
    phases = item_phases(instance, Schedule(schedule.instance, batches))
    for j, (batch, batch_phases) in enumerate(zip(batches, phases), first):
        s, e = result.starts[j], result.ends[j]
        for rid in batch.evict:
            evictions.append((s, row[rid]))
        for it, pre in zip(batch.items, batch_phases):
            lst = runs[pre].setdefault(it.id, [])
            if merge and previous.get(it.id) == (j - 1, pre) and lst:
                lst[-1][1] = e
            else:
                lst.append([s, e])
            previous[it.id] = (j, pre)
    return row, runs, evictions


def window_batches(schedule: Schedule, first: int, last: int, keep: set[str]) -> tuple[Batch, ...]:
    """Batches ``first`` to ``last`` (excluded) of ``schedule`` with only the items and evictions of
    the requests in ``keep``, built from its columns (no object for any other batch)."""
    cols = schedule.columns()
    kept = np.fromiter((rid in keep for rid in cols.ids), bool, len(cols.ids))
    ids, ip, ep = cols.ids, cols.item_ptr, cols.evict_ptr
    out = []
    for j in range(first, last):
        refs, tokens = cols.item_ref[ip[j] : ip[j + 1]], cols.item_tokens[ip[j] : ip[j + 1]]
        mask = kept[refs]
        evicts = cols.evict_ref[ep[j] : ep[j + 1]]
        start = float(cols.start[j])
        out.append(
            Batch(
                tuple(Item(ids[r], int(t)) for r, t in zip(refs[mask].tolist(), tokens[mask].tolist())),
                tuple(ids[r] for r in evicts[kept[evicts]].tolist()),
                None if math.isnan(start) else start,
            )
        )
    return tuple(out)


def busiest_window(arrivals: Sequence[float], rows: int) -> int:
    """First index of the ``rows`` consecutive arrivals (sorted) with the shortest span: the
    busiest window of the trace (0 when there are at most ``rows``)."""
    if len(arrivals) <= rows:
        return 0
    spans = [arrivals[k + rows - 1] - arrivals[k] for k in range(len(arrivals) - rows + 1)]
    return min(range(len(spans)), key=spans.__getitem__)


def plot_timeline(instance: Instance, schedule: Schedule, result: ReplayResult, title: str) -> Figure:
    """Gantt chart of a schedule: one row per request (by arrival), prefill and decode runs over
    time; above :data:`TIMELINE_ROWS` requests, those of the busiest window only (the consecutive
    arrivals with the shortest span), its time axis cut to their work."""
    merge = schedule.columns().n_batches > MERGE_ABOVE
    order = sorted(instance.requests, key=lambda r: (r.arrival, r.id))
    first = busiest_window([r.arrival for r in order], TIMELINE_ROWS)
    window = order[first : first + TIMELINE_ROWS]
    keep = {r.id for r in window} if len(window) < len(order) else None
    row, runs, evictions = timeline_segments(instance, schedule, result, merge, keep)
    if keep is not None:
        row = {rid: k - first for rid, k in row.items() if rid in keep}
        evictions = [(t, k - first) for t, k in evictions]
        title += f" (requests {first + 1}-{first + len(window)} of {len(order)} by arrival: the busiest window)"
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
    arrivals = window
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
    ends = [e for by in runs.values() for segs in by.values() for _, e in segs]
    lo = min((r.arrival for r in window), default=0.0)
    hi = max(ends, default=lo + 1.0)
    ax.set_xlim(lo, hi + 0.01 * (hi - lo) if hi > lo else lo + 1.0)
    ax.set_ylim(n - 0.5, -0.5)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("request (by arrival)")
    if n <= 40:
        ax.set_yticks(range(n), [r.id for r in arrivals], fontsize=7)
    ax.set_title(title, loc="left", fontsize=10)
    ax.legend(
        handles=[
            Patch(color=PREFILL, label="prefill"),
            Patch(color=DECODE, label="decode"),
            Line2D([], [], marker="|", ls="", color="#888888", label="arrival"),
            Line2D([], [], marker="X", ls="", color=EVICT, label=f"eviction ({len(evictions)})"),
        ],
        loc="upper right",
        ncols=4,
        fontsize=8,
        framealpha=0.9,
    )
    return fig


def _steps(result: ReplayResult, values: Sequence[int]) -> tuple[list[float], list[float]]:
    """(t, value) of a step function: each batch's value holds from its start to its end."""
    xs, ys = [], []
    for s, e, v in zip(result.starts, result.ends, values):
        xs += [s, e]
        ys += [v, v]
    return xs, ys


def _styled(schedules: Sequence[tuple[str, ReplayResult]], best: str | None) -> list[tuple[str, ReplayResult, dict]]:
    """The schedules with their line styles, greyed ones first (drawn under the highlighted)."""
    out = []
    for label, res in schedules:
        color = schedule_color(label, best)
        grey = color == OTHER
        style = {"color": color, "lw": 0.7 if grey else 1.6, "zorder": 1 if grey else 3, "alpha": 0.7 if grey else 1.0}
        out.append((label, res, style))
    return sorted(out, key=lambda x: x[2]["zorder"])


def _legend_handles(styled: list[tuple[str, ReplayResult, dict]]) -> list[Line2D]:
    """One legend entry per highlighted schedule and one for the greyed policies."""
    handles = [
        Line2D([], [], color=st["color"], lw=st["lw"], label=label) for label, _, st in styled if st["zorder"] > 1
    ]
    greyed = sum(1 for *_, st in styled if st["zorder"] == 1)
    if greyed:
        handles.append(Line2D([], [], color=OTHER, lw=0.7, label=f"{greyed} other policies"))
    return handles


def _highlighted_end(styled: list[tuple[str, ReplayResult, dict]]) -> float:
    """The latest end among the highlighted schedules (all when none is): the time axes' end."""
    shown = [res for _, res, st in styled if st["zorder"] > 1] or [res for _, res, _ in styled]
    return max((res.ends[-1] for res in shown if res.ends), default=1.0)


def plot_memory(report: Report, schedules: Sequence[tuple[str, ReplayResult]]) -> Figure:
    """KV slots used and running requests after each batch, per schedule, against M and R_max;
    the best schedule, the solver's, vLLM and Sarathi highlighted, the other policies grey, time
    cut to the highlighted schedules' end."""
    lim = report.instance.limits
    best = report.best[0] if report.best is not None else None
    fig = Figure(figsize=(11, 6.5), layout="constrained")
    ax_kv, ax_run = fig.subplots(2, 1, sharex=True)
    styled = _styled(schedules, best)
    for _, res, style in styled:
        ax_kv.plot(*_steps(res, res.kv_used), **style)
        ax_run.plot(*_steps(res, res.running), **style)
    handles = _legend_handles(styled)
    if lim.kv_capacity is not None:
        ax_kv.axhline(lim.kv_capacity, color=EVICT, ls="--", lw=1.2)
        handles.append(Line2D([], [], color=EVICT, ls="--", label=f"M = {lim.kv_capacity}"))
    if lim.max_running is not None:
        ax_run.axhline(lim.max_running, color=EVICT, ls="--", lw=1.2, label=f"R_max = {lim.max_running}")
        ax_run.legend(loc="upper right", fontsize=8)
    ax_kv.set_xlim(0, _highlighted_end(styled) * 1.01)
    ax_kv.set_ylabel("KV slots in use (tokens)")
    ax_run.set_ylabel("running requests")
    ax_run.set_xlabel("time (s)")
    ax_kv.set_title("KV-cache use and running size after each batch")
    ax_kv.legend(handles=handles, loc="upper right", fontsize=8, framealpha=0.9)
    return fig


def plot_bounds_bars(report: Report, groups: dict[str, list[str]] | None = None) -> Figure:
    """Horizontal bars: proven comparable bounds, the solver's schedule, every policy (best bound
    line); ``groups`` folds schedules with the same batches into one bar (``a = b``)."""
    rows: list[tuple[str, float, str]] = []
    for b in report.bounds:
        if b.comparable and b.objective == report.objective and math.isfinite(b.value):
            rows.append((
                f"bound {b.source}/{b.name}" + ("" if b.valid else " (unproven)"),
                b.value,
                BOUND if b.valid else "#DDDDDD",
            ))
    best = report.best[0] if report.best is not None else None
    for label, value, _, _ in sorted(report.candidates(), key=lambda c: c[1]):
        if groups is not None and label not in groups:
            continue
        members = [label] if groups is None else groups[label]
        text = " = ".join([members[0], *(m.split(":", 1)[1] for m in members[1:])])
        rows.append((text if len(text) <= 60 else text[:57] + "...", value, schedule_color(label, best)))
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
    ax.set_title("Lower bounds and schedules; labels: ratio to the best bound", fontsize=10)
    ax.margins(x=0.12)
    return fig


def _cdf(values: Sequence[float]) -> tuple[list[float], list[float]]:
    """Step points of the empirical CDF at the plotting positions (k + 0.5) / n, inside (0, 1)
    so that the logit axis shows every point."""
    xs = sorted(values)
    n = len(xs)
    return xs, [(k + 0.5) / n for k in range(n)]


def _slo_targets(instance: Instance | None, quantity: str) -> list[float]:
    """The distinct SLO targets (s) of ``quantity`` the requests carry (at most three shown)."""
    if instance is None:
        return []
    found = {getattr(r.slo, quantity) for r in instance.requests if r.slo is not None}
    return sorted(v for v in found if v is not None)[:3]


def plot_latency_cdfs(
    schedules: Sequence[tuple[str, ReplayResult]], best: str | None = None, instance: Instance | None = None
) -> Figure:
    """Empirical CDFs of per-request TTFT and TPOT (ms), one line per schedule, on a tail-zoomed
    (logit) share axis marked P10-P99.9; the best schedule, the solver's, vLLM and Sarathi
    highlighted, the other policies grey; the requests' SLO targets as dashed red lines."""
    fig = Figure(figsize=(11, 4.6), layout="constrained")
    axes = fig.subplots(1, 2, sharey=True)
    styled = _styled(schedules, best if best is not None else (schedules[0][0] if schedules else None))
    for ax, quantity in ((axes[0], "ttft"), (axes[1], "tpot")):
        positive: list[float] = []
        for _, res, style in styled:
            values = [1e3 * v for o in res.outcomes.values() if (v := getattr(o, quantity)) is not None]
            if not values:
                continue
            positive += [v for v in values if v > 0]
            ax.step(*_cdf(values), where="post", **style)
        for target in _slo_targets(instance, quantity):
            ax.axvline(1e3 * target, color=EVICT, ls="--", lw=1.2)
            positive.append(1e3 * target)
        if positive and max(positive) / min(positive) > 50:
            ax.set_xscale("log")
        else:
            ax.xaxis.set_major_locator(MaxNLocator(nbins=5))
        ax.set_xlabel(f"{quantity.upper()} (ms)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("share of requests (tail-zoomed)")
    axes[0].set_yscale("logit")
    n = max((len(res.outcomes) for _, res, _ in styled), default=1)
    axes[0].set_ylim(min(0.05, 0.5 / n), 1 - min(0.0005, 0.5 / n))
    axes[0].set_yticks(CDF_TICKS, [f"P{100 * q:g}" for q in CDF_TICKS])
    axes[0].yaxis.set_minor_locator(matplotlib.ticker.NullLocator())  # the logit scale's many minor ticks
    handles = _legend_handles(styled)
    if any(_slo_targets(instance, q) for q in ("ttft", "tpot")):
        handles.append(Line2D([], [], color=EVICT, ls="--", label="SLO target"))
    if handles:
        axes[0].legend(handles=handles, loc="lower right", fontsize=8, framealpha=0.9)
    fig.suptitle("Per-request TTFT and TPOT per schedule (empirical CDF)")
    return fig
