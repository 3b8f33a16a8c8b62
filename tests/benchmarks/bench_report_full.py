"""Benchmark: `optsched report` on the full splitwise_conv trace (19,366 requests) under a time limit.

Run on demand (not collected by pytest):

    python tests/benchmarks/bench_report_full.py [--time-limit 180] [--policies vllm,sarathi]
        [--solve-max-requests N] [--html-only]

Runs the real command line in a subprocess (``--cost-model llama2-7b-h200 --html``, JSON on stdout)
and prints its wall time against the limit (the goal: within the limit plus 1 s) and the report's
phase times. ``--html-only`` instead gathers the report in this process without a limit and times
the HTML page alone (the goal: a few seconds at 20,000 requests).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: ``<repo>/../shared/data`` or the same under any ancestor of the repo (worktrees).
TRACE = next(
    (
        base / "shared" / "data" / "traces" / "splitwise_conv.csv"
        for base in REPO.parents
        if (base / "shared" / "data").is_dir()
    ),
    REPO.parent / "shared" / "data" / "traces" / "splitwise_conv.csv",
)
COST_MODEL = "llama2-7b-h200"


def run_command(time_limit: float, policies: str, solve_max_requests: int | None) -> None:
    """The whole command, timed from outside (start-up and exit included)."""
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "report.html"
        argv = [sys.executable, "-m", "optsched", "report", str(TRACE), "--cost-model", COST_MODEL]
        argv += ["--policies", policies, "--time-limit", str(time_limit), "--html", str(page), "--json", "--quiet"]
        if solve_max_requests is not None:
            argv += ["--solve-max-requests", str(solve_max_requests)]
        t0 = time.perf_counter()
        proc = subprocess.run(argv, capture_output=True, text=True, cwd=REPO)
        wall = time.perf_counter() - t0
        print(f"exit {proc.returncode}, wall {wall:.1f} s for --time-limit {time_limit:g} s", flush=True)
        if proc.returncode != 0:
            print(proc.stderr[-2000:])
            return
        data = json.loads(proc.stdout)
        run = data["run"]
        print(f"report wall_time {run['wall_time']:.1f} s, partial {data['partial']}")
        print("phases:", {k: round(v, 1) for k, v in run["phase_times"].items()})
        print("policies:", {k: round(v, 1) for k, v in run["policy_wall_times"].items()})
        print("bounders:", {k: round(v, 1) for k, v in run["bounder_wall_times"].items()})
        print("solver:", run["solver_wall_time"], "html bytes:", page.stat().st_size if page.exists() else None)


def time_html(policies: str) -> None:
    """The HTML page of a full-trace report, timed alone."""
    from optsched.report import build_report, report_html
    from optsched.workload import load_trace

    instance = load_trace(TRACE, COST_MODEL)
    t0 = time.perf_counter()
    report = build_report(instance, time_limit=None, policies=policies.split(","), solve_max_requests=0)
    print(f"{len(instance.requests)} requests: report gathered in {time.perf_counter() - t0:.1f} s", flush=True)
    t0 = time.perf_counter()
    text = report_html(report)
    print(f"HTML page: {time.perf_counter() - t0:.1f} s, {len(text) / 1e6:.1f} MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--time-limit", type=float, default=180.0)
    parser.add_argument("--policies", default="vllm,sarathi")
    parser.add_argument("--solve-max-requests", type=int, default=None)
    parser.add_argument("--html-only", action="store_true")
    args = parser.parse_args()
    if not TRACE.exists():
        sys.exit(f"{TRACE} is absent")
    if args.html_only:
        time_html(args.policies)
    else:
        run_command(args.time_limit, args.policies, args.solve_max_requests)


if __name__ == "__main__":
    main()
