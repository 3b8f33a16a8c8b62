"""The report as one self-contained HTML file: tables and inline SVG plots, no script, no fetch.

Every picture is drawn by :mod:`optsched.report.plots` and embedded as SVG text (large collections
are rasterized into the SVG as embedded PNG data). The page has no JavaScript and references no
external resource, so it renders offline and identically everywhere.
"""

from __future__ import annotations

import html
import io
from pathlib import Path

import matplotlib
from matplotlib.figure import Figure

from ..jsonio import write_text_atomic
from ..schedule import ReplayResult
from .gather import Report
from .output import TABLE_KEYS, grouped_messages, report_rows
from .plots import plot_bounds_bars, plot_latency_cdfs, plot_memory, plot_timeline

__all__ = ["CSS", "figure_svg", "report_html", "write_html"]

CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;margin:24px auto;max-width:1150px;
color:#222;line-height:1.4}
h1{font-size:1.5em;margin-bottom:0}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:13px;margin:8px 0}
th,td{padding:3px 8px;border-bottom:1px solid #eee;text-align:right}
th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}
tr.best td{font-weight:bold;background:#eef6ee}.note{color:#555;font-size:13px}
.partial{background:#fff3cd;padding:6px 10px;border:1px solid #e0c36c}
figure{margin:12px 0}figcaption{font-size:13px;color:#555}svg{max-width:100%;height:auto}
"""


def figure_svg(fig: Figure) -> str:
    """A figure as inline SVG text (deterministic ids and no date)."""
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": "optsched", "svg.fonttype": "none"}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    text = buf.getvalue()
    return text[text.index("<svg"):]


def _num(value: object, digits: int = 5) -> str:
    if value is None:
        return "&ndash;"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return html.escape(str(value))


def _pct(value: float | None) -> str:
    return "&ndash;" if value is None else f"{100 * value:.1f}%"


def _figure(svg: str, caption: str) -> str:
    return f"<figure>{svg}<figcaption>{html.escape(caption)}</figcaption></figure>"


def report_html(report: Report) -> str:
    """The report page as an HTML string."""
    inst = report.instance
    lim = inst.limits
    e = html.escape
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>optsched report: {e(inst.name)}</title><style>{CSS}</style></head><body>",
        f"<h1>optsched bound report: {e(inst.name)}</h1>",
        f"<p>{len(inst.requests)} requests, cost model <b>{e(inst.cost_model.name)}</b>, "
        f"C = {lim.token_budget}, P = {lim.prefill_budget}, M = {_num(lim.kv_capacity)}, "
        f"R<sub>max</sub> = {_num(lim.max_running)}. Objective: <b>{e(report.objective)}</b>. "
        "Every schedule below was replayed under the contract's semantics.</p>",
    ]
    if report.partial:
        parts.append("<p class='partial'>Partial report: " + e("; ".join(report.notes)) + "</p>")
    best_bound, best = report.best_bound, report.best
    if best is not None:
        parts.append(
            f"<p>Best schedule: <b>{e(best[0])}</b>, {e(report.objective)} {best[1]:.6g}"
            + (f"; best proven lower bound {best_bound.value:.6g} ({e(best_bound.source)}/{e(best_bound.name)}); "
               f"gap {_pct(report.gap(best[1]))}" if best_bound is not None else "")
            + (" &mdash; <b>proven optimal</b>" if report.proven_optimal else "")
            + ".</p>"
        )
    parts.append("<h2>Lower bounds</h2><table><tr><th>source</th><th>bound</th><th>value</th><th>proven</th>"
                 "<th>compared</th><th style='text-align:left'>note</th></tr>")
    for b in report.bounds:
        parts.append(f"<tr><td>{e(b.source)}</td><td>{e(b.name)}</td><td>{_num(b.value, 7)}</td>"
                     f"<td>{'yes' if b.valid else 'no'}</td><td>{'yes' if b.comparable else 'no'}</td>"
                     f"<td style='text-align:left'>{e(b.note)}</td></tr>")
    parts.append("</table>")
    columns = [k for k in TABLE_KEYS if k != report.objective]
    parts.append("<h2>Schedules</h2><p class='note'>gap = (value &minus; best proven bound) / value.</p><table><tr>"
                 f"<th>schedule</th><th>status</th><th>{e(report.objective)}</th><th>gap</th>"
                 + "".join(f"<th>{e(k)}</th>" for k in columns) + "</tr>")
    for row in report_rows(report):
        label = f"{row['kind']}:{row['name']}"
        cls = " class='best'" if best is not None and label == best[0] else ""
        m = row["metrics"] or {}
        parts.append(f"<tr{cls}><td>{e(label)}</td><td>{e(row['status'])}</td><td>{_num(row['objective'], 6)}</td>"
                     f"<td>{_pct(row['gap'])}</td>" + "".join(f"<td>{_num(m.get(k), 4)}</td>" for k in columns)
                     + "</tr>")
    parts.append("</table>")
    for message, names in grouped_messages(report_rows(report)):
        parts.append(f"<p class='note'>{e(', '.join(names))}: {e(message)}</p>")
    for note in report.notes:
        parts.append(f"<p class='note'>note: {e(note)}</p>")

    parts.append("<h2>Bounds, best schedule and policies</h2>")
    parts.append(_figure(figure_svg(plot_bounds_bars(report)),
                         "Green: proven lower bounds; black: the best schedule found; blue: the solver; orange: policies."))
    shown: list[tuple[str, ReplayResult]] = [(label, res) for label, _, _, res in sorted(report.candidates(), key=lambda c: c[1])]
    if best is not None:
        parts.append("<h2>Batch timeline of the best schedule</h2>")
        parts.append(_figure(figure_svg(plot_timeline(inst, best[2], best[3], f"{best[0]}: {report.objective} {best[1]:.6g}")),
                             "One row per request in arrival order; blue prefill, orange decode, grey tick arrival, red x eviction."))
        worst_policy = next((c for c in sorted(report.candidates(), key=lambda c: -c[1]) if c[0] != best[0]), None)
        if worst_policy is not None:
            parts.append(f"<h2>Batch timeline of the worst policy ({e(worst_policy[0])})</h2>")
            parts.append(_figure(figure_svg(plot_timeline(inst, worst_policy[2], worst_policy[3],
                                                    f"{worst_policy[0]}: {report.objective} {worst_policy[1]:.6g}")),
                                 "Same layout as above, for contrast."))
    if shown:
        parts.append("<h2>KV-cache use and running size</h2>")
        parts.append(_figure(figure_svg(plot_memory(report, shown)),
                             "Black: the best schedule; dashed red: the limits M and R_max (when set)."))
        parts.append("<h2>TTFT and TPOT per request (CDF)</h2>")
        parts.append(_figure(figure_svg(plot_latency_cdfs(shown)),
                             "Share of requests with TTFT / TPOT at most x, per schedule; black: the best schedule; "
                             "dotted: P50 and P99."))
    parts.append("<p class='note'>Generated by optsched report. No scripts, no external resources.</p></body></html>")
    return "\n".join(parts)


def write_html(report: Report, path: str | Path) -> None:
    """Write the report page atomically (:func:`optsched.jsonio.write_text_atomic`)."""
    write_text_atomic(path, report_html(report))
