"""The HTML pages read well at 1,400 px: the README's main job, a 300-request report at 4x load
and a sweep report, opened in headless Chromium (no horizontal overflow of the page, tables
scrolling inside their box, the best schedule, vLLM and Sarathi highlighted), and every legend
of their plots inside its axes (or, for the sweep's Pareto plots, inside the figure and off the
points)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from optsched.cli import main
from optsched.instance import load_instance
from optsched.report import build_report
from optsched.report.plots import (
    busiest_window,
    plot_bounds_bars,
    plot_latency_cdfs,
    plot_memory,
    plot_timeline,
    timeline_segments,
)
from optsched.report.terminal import fold_identical
from optsched.sweep.report import load_rows, plot_pareto, short_labels
from tests.support.chromium import run_chromium
from tests.support.paths import REPO, shared_data
from tests.sweep.test_sweep_report import sweep_dir  # noqa: F401 - the fixture: a small grid and a capacity search

TRACE = (shared_data() or REPO / "no-shared-data") / "traces" / "splitwise_conv.csv"
WIDTH = 1400

#: Appended to a copy of a page (the pages themselves have no script): the page's and the window's
#: widths and the widest table box, written into the DOM that --dump-dom prints.
PROBE = """<script>
window.addEventListener('load', () => {
  const boxes = [...document.querySelectorAll('.scroll')];
  const out = {page: document.documentElement.scrollWidth, window: window.innerWidth,
    boxes: boxes.map(b => [b.clientWidth, b.scrollWidth, getComputedStyle(b).overflowX])};
  const pre = document.createElement('pre'); pre.id = 'probe'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def probe(page: Path, tmp_path: Path) -> tuple[dict, str]:
    """(the widths measured in Chromium at 1,400 px, the DOM)."""
    copy = tmp_path / f"probe-{page.name}"
    copy.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    rc, dom, console = run_chromium(copy, tmp_path, "--dump-dom", f"--window-size={WIDTH},1000")
    assert rc == 0 and console == [], console
    found = re.search(r'<pre id="probe">(.*?)</pre>', dom)
    assert found, "the probe did not run"
    return json.loads(found.group(1).replace("&quot;", '"')), dom


def check_page(page: Path, tmp_path: Path) -> str:
    widths, dom = probe(page, tmp_path)
    assert widths["window"] == WIDTH, widths
    assert widths["page"] <= widths["window"], widths  # no horizontal overflow of the page
    for client, _, overflow in widths["boxes"]:
        assert client <= widths["window"] and overflow == "auto", widths  # wide tables scroll in their box
    shot = tmp_path / f"{page.stem}.png"
    rc, _, console = run_chromium(page, tmp_path, f"--screenshot={shot}", f"--window-size={WIDTH},3000")
    assert rc == 0 and console == [] and shot.stat().st_size > 20_000
    return dom


def legends_inside(fig) -> None:
    """Every axes legend inside its axes; every figure legend inside the figure and off the axes."""
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    fig_box = fig.get_window_extent(renderer)
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is not None:
            box, frame = legend.get_window_extent(renderer), ax.get_window_extent(renderer)
            assert frame.x0 - 1 <= box.x0 and box.x1 <= frame.x1 + 1, (box, frame)
            assert frame.y0 - 1 <= box.y0 and box.y1 <= frame.y1 + 1, (box, frame)
    for legend in fig.legends:
        box = legend.get_window_extent(renderer)
        assert fig_box.x0 <= box.x0 and box.x1 <= fig_box.x1 + 1 and fig_box.y0 <= box.y0 and box.y1 <= fig_box.y1 + 1
        for ax in fig.axes:
            assert not box.overlaps(ax.get_window_extent(renderer)), "a figure legend over the points"


def check_report_figures(report) -> None:
    shown = [(c[0], c[3]) for c in sorted(report.candidates(), key=lambda c: c[1])]
    best = report.best
    for fig in (
        plot_bounds_bars(report, fold_identical(report)),
        plot_timeline(report.instance, best[2], best[3], best[0]),
        plot_memory(report, shown),
        plot_latency_cdfs(shown, best[0], report.instance),
    ):
        legends_inside(fig)


def highlighted(dom: str) -> None:
    rows = re.findall(r"<tr class=\"(\w+)\"><td>([^<]*)</td>", dom)
    classes = {cls for cls, _ in rows}
    assert "best" in classes and "other" in classes, classes
    marked = " ".join(label for cls, label in rows if cls in ("best", "engine"))
    assert "policy:vllm" in marked and "policy:sarathi" in marked, marked


def test_readme_main_job_page(tmp_path: Path) -> None:
    page = tmp_path / "main.html"
    assert main(["report", "splitwise-conv-100", "--time-limit", "60", "--quiet", "--html", str(page)]) == 0
    highlighted(check_page(page, tmp_path))


def test_300_requests_at_4x_load_page(tmp_path: Path) -> None:
    if not TRACE.exists():
        pytest.skip(f"{TRACE} is absent")
    page = tmp_path / "r300.html"
    argv = ["report", str(TRACE), "--cost-model", "llama2-7b-h200", "--first", "300", "--rate-scale", "4"]
    assert main([*argv, "--time-limit", "60", "--quiet", "--html", str(page)]) == 0
    highlighted(check_page(page, tmp_path))


def test_report_legends_inside_their_axes() -> None:
    report = build_report(load_instance("splitwise-conv-100"), time_limit=None, solve_max_requests=0)
    check_report_figures(report)


def test_sweep_page(sweep_dir: Path, tmp_path: Path) -> None:  # noqa: F811 - the imported fixture
    page = tmp_path / "sweep.html"
    assert main(["sweep-report", str(sweep_dir), "--html", str(page)]) == 0
    check_page(page, tmp_path)
    rows = [r for r in load_rows(sweep_dir) if r["kind"] == "simulate" and r["ttft_p99"] is not None]
    legends_inside(plot_pareto(rows, "toy-4", "ttft_p99"))


def test_short_labels_keep_what_differs() -> None:
    labels, common = short_labels([["w", "A M=1", "vllm"], ["w", "A M=1", "sarathi"], ["w", "A M=2", "vllm"]])
    assert labels == ["A M=1 | vllm", "A M=1 | sarathi", "A M=2 | vllm"] and common == "w"


def test_busiest_window() -> None:
    arrivals = [0.0, 1.0, 2.0, 3.0, 3.1, 3.2, 3.3, 9.0]
    assert busiest_window(arrivals, 4) == 3 and busiest_window(arrivals, 20) == 0


def test_timeline_window_matches_the_whole_schedule() -> None:
    """The busiest window's runs and evictions, read from its time span only, are those of the
    whole schedule restricted to the window (aladdin-fig3's optimum evicts; a policy on 100 requests)."""
    for name, policy in (("splitwise-conv-100", "sarathi"), ("aladdin-fig3", None)):
        report = build_report(load_instance(name), time_limit=30, policies=[policy] if policy else None)
        for _, _, schedule, res in report.candidates()[:3]:
            inst = report.instance
            order = sorted(inst.requests, key=lambda r: (r.arrival, r.id))
            rows = min(len(order) - 1, 20)
            start = busiest_window([r.arrival for r in order], rows)
            keep = {r.id for r in order[start : start + rows]}
            for merge in (False, True):
                row, runs, evictions = timeline_segments(inst, schedule, res, merge)
                _, part, part_evictions = timeline_segments(inst, schedule, res, merge, keep)
                assert part == {pre: {k: v for k, v in by.items() if k in keep} for pre, by in runs.items()}
                assert part_evictions == [(t, k) for t, k in evictions if order[k].id in keep]
