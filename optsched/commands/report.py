"""``optsched report INSTANCE [--time-limit S] [--html FILE] [--json]``: the bound report.

Gathers every proven lower bound, the best schedule found within the time limit and every
policy's metrics (:func:`optsched.report.build_report`), then prints a table (or, with ``--json``,
one JSON object whose keys docs/report.md documents) and optionally writes a self-contained HTML
page. Progress goes to stderr. Ctrl-C or the time limit yield the partial report (exit 0, with
``partial: true``). INSTANCE is an instance JSON file, a shipped instance name, or a trace CSV
(``--cost-model`` and limits from the instance options).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time

from ..policies import POLICIES
from ..progress import Progress
from ..report import Report, build_report, report_table, report_to_dict
from ..report.gather import SOLVE_MAX_REQUESTS
from ..report.terminal import DEFAULT_COLUMNS, parse_columns
from ..request_table import write_request_table
from ..result import OBJECTIVE_NAMES, default_objective
from ._common import (
    BadInput,
    add_instance_arguments,
    add_requests_out_flag,
    check_output_path,
    check_requests_out,
    command_budget,
    count_int,
    load_instance_arg,
    positive_float,
    print_json,
    time_left,
)
from .solve import known_formulation

#: Seconds of the time limit kept for drawing the HTML page, per request (at least 5 s, at most 30 s).
HTML_RESERVE_PER_REQUEST = 0.02
#: Seconds the HTML page's figures leave before the deadline for the terminal table or JSON.
OUTPUT_RESERVE = 0.25


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "report",
        help="proven bounds, best schedule and every policy, with gaps (table, JSON, HTML)",
        description=__doc__.split("\n\n")[1],
    )
    add_instance_arguments(p)
    p.add_argument(
        "--time-limit",
        type=positive_float,
        default=60.0,
        metavar="S",
        help="overall time limit in seconds, HTML included (default 60)",
    )
    p.add_argument("--html", metavar="FILE", help="write a self-contained HTML report here")
    add_requests_out_flag(p, "the best schedule (or --policy's)")
    p.add_argument(
        "--policy",
        metavar="NAME",
        help="--requests-out: write this policy's schedule ('solver': the solver's; default: the best)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument(
        "--objective",
        choices=OBJECTIVE_NAMES,
        help="objective compared (default: latency when requests arrive at different times, else makespan; "
        "completion is an alias of latency)",
    )
    p.add_argument("--policies", metavar="LIST", help="comma-separated policies (default: all registered)")
    p.add_argument(
        "--problem", default="infermax", help="problem whose solver seeks the best schedule (default infermax)"
    )
    p.add_argument(
        "--solve-max-requests",
        type=count_int,
        default=SOLVE_MAX_REQUESTS,
        metavar="N",
        help="run the solver only on instances of at most N requests (default: any size; 0 = never)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument(
        "--columns",
        metavar="LIST",
        help=f"metric columns of the schedule table, comma-separated, or 'all' (default {','.join(DEFAULT_COLUMNS)})",
    )
    p.add_argument("--wide", action="store_true", help="every metric column (as --columns all, so not with --columns)")
    p.add_argument(
        "--verbose", action="store_true", help="also the bounds not compared and the bounders that do not apply"
    )
    p.set_defaults(func=handle)


def table_width(wide: bool) -> int:
    """Columns of the terminal table: the terminal's width on a terminal, else 120 (``--wide``: no
    limit off a terminal)."""
    if sys.stdout.isatty():
        return shutil.get_terminal_size().columns
    return 1000 if wide else 120


def _write_requests(report: Report, path: str, policy: str | None, progress: Progress) -> None:
    """The per-request table of ``policy``'s schedule (``solver``: the solver's; None: the best);
    a note on stderr when there is no such schedule."""
    if policy is None:
        found = report.best
    else:
        label = f"solver:{report.solver.problem}" if policy == "solver" and report.solver else f"policy:{policy}"
        found = next((c for c in report.candidates() if c[0] == label), None)
    if found is None:
        what = "no schedule replayed cleanly" if policy is None else f"no clean schedule of {policy!r} in the report"
        print(f"optsched: note: {what}: {path} not written", file=sys.stderr)
        return
    progress(f"writing {path} ({found[0]})")
    write_request_table(path, found[3])


def _check_policy(args: argparse.Namespace, policies: list[str] | None) -> None:
    """``--policy`` names a policy the report runs (or ``solver``), and only with ``--requests-out``."""
    if args.policy is None:
        return
    if args.requests_out is None:
        raise BadInput("--policy: applies only with --requests-out (the schedule whose requests are written)")
    if args.policy == "solver":
        return
    run = policies if policies is not None else sorted(POLICIES)
    if args.policy not in run:
        where = "--policies" if policies is not None else "the registered policies"
        raise BadInput(f"--policy: {args.policy!r} is not among {where} ({', '.join(run)})")


def handle(args: argparse.Namespace) -> int:
    t0 = getattr(args, "started", time.perf_counter())  # the limit counts from the program's start
    policies = None
    if args.policies is not None:
        policies = [p.strip() for p in args.policies.split(",") if p.strip()]
        unknown = [p for p in policies if p not in POLICIES]
        if unknown or not policies:
            what = f"unknown policy {unknown[0]!r}" if unknown else "no policy given"
            raise BadInput(f"--policies: {what} (known: {', '.join(sorted(POLICIES))})")
    try:
        columns = parse_columns(args.columns, args.wide)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    _check_policy(args, policies)
    known_formulation(args.problem)  # an unknown --problem is bad input (its solver loads beside the policies)
    check_requests_out(args.requests_out)
    check_output_path(args.html, args.requests_out)
    with Progress("report", args.time_limit, "s", clock=True, enabled=not args.quiet, started=t0) as progress:
        report = _run(args, t0, policies, progress)
    if args.json:
        print_json(report_to_dict(report))
    else:
        print(report_table(report, columns, args.verbose, table_width(args.wide)))
    return 0


def _run(args: argparse.Namespace, t0: float, policies: list[str] | None, progress: Progress) -> Report:
    """The report's phases under ``progress``: load, gather, write the files."""
    progress.doing(f"loading {args.instance}")
    instance = load_instance_arg(args)
    reserve = 0.0
    if args.html:
        reserve = min(30.0, max(5.0, HTML_RESERVE_PER_REQUEST * len(instance.requests)), args.time_limit / 3)
    report = build_report(
        instance,
        objective=args.objective or default_objective(instance),
        time_limit=time_left(args, args.time_limit),
        policies=policies,
        solve_problem=args.problem,
        solve_max_requests=args.solve_max_requests,
        reserve=reserve,
        progress=progress,
    )
    report.time_limit = args.time_limit
    if args.requests_out is not None:
        _write_requests(report, args.requests_out, args.policy, progress)
    if args.html:
        progress(f"writing {args.html}")
        from ..report.html import write_html  # matplotlib loads only when a page is drawn

        write_html(report, args.html, command_budget(args, args.time_limit).reserve(OUTPUT_RESERVE))
    report.wall_time = time.perf_counter() - t0
    progress(f"done in {report.wall_time:.1f}s")
    return report
