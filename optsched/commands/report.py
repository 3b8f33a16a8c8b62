"""``optsched report INSTANCE [--time-limit S] [--html FILE] [--json]``: the bound report.

Gathers every proven lower bound, the best schedule found within the time limit and every
policy's metrics (:func:`optsched.report.build_report`), then prints a table (or, with ``--json``,
one JSON object whose keys docs/report.md documents) and optionally writes a self-contained HTML
page. Progress goes to stderr. Ctrl-C or the time limit yield the partial report (exit 0, with
``partial: true``). INSTANCE is an instance JSON file, a shipped instance name, or a trace CSV
(cost model and limits from the options below).
"""

from __future__ import annotations

import argparse
import time

from ..cli import BadInput, print_json
from ..instance import Instance, Limits, load_instance, load_trace_csv
from ..policies import POLICIES
from ..report import Progress, build_report, report_table, report_to_dict, write_html
from ..report.gather import SOLVE_MAX_REQUESTS
from ..result import OBJECTIVES

#: Seconds of the time limit kept for drawing the HTML page, per request (at least 2 s, at most 30 s).
HTML_RESERVE_PER_REQUEST = 0.02


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "report",
        help="proven bounds, best schedule and every policy, with gaps (table, JSON, HTML)",
        description=__doc__.split("\n\n")[1],
    )
    p.add_argument("instance", help="instance JSON, shipped instance name, or trace CSV")
    p.add_argument("--time-limit", type=float, default=60.0, metavar="S",
                   help="overall time limit in seconds, HTML included (default 60)")
    p.add_argument("--html", metavar="FILE", help="write a self-contained HTML report here")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument("--objective", choices=OBJECTIVES, default="makespan", help="objective compared (default makespan)")
    p.add_argument("--policies", metavar="LIST", help="comma-separated policies (default: all registered)")
    p.add_argument("--problem", default="infermax", help="problem whose solver seeks the best schedule (default infermax)")
    p.add_argument("--solve-max-requests", type=int, default=SOLVE_MAX_REQUESTS, metavar="N",
                   help=f"run the solver only on instances of at most N requests (default {SOLVE_MAX_REQUESTS}; 0 = never)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    g = p.add_argument_group("trace CSV input")
    g.add_argument("--cost-model", default="llama2-7b-a100", help="cost model profile (default llama2-7b-a100)")
    g.add_argument("--token-budget", type=int, default=4096, metavar="C")
    g.add_argument("--prefill-budget", type=int, default=None, metavar="P", help="default: C")
    g.add_argument("--kv-capacity", type=int, default=None, metavar="M")
    g.add_argument("--max-running", type=int, default=None, metavar="R")
    g.add_argument("--first", type=int, default=None, metavar="N", help="only the first N rows of the trace")
    g.add_argument("--offline", action="store_true", help="ignore the trace's arrival times")
    p.set_defaults(func=handler)


def _load(args: argparse.Namespace) -> Instance:
    if str(args.instance).endswith(".csv"):
        if args.prefill_budget is not None and args.prefill_budget > args.token_budget:
            raise BadInput(f"--prefill-budget {args.prefill_budget} exceeds --token-budget {args.token_budget}")
        for flag in ("token_budget", "prefill_budget", "kv_capacity", "max_running", "first"):
            value = getattr(args, flag)
            if value is not None and value < 1:
                raise BadInput(f"--{flag.replace('_', '-')}: must be >= 1, got {value}")
        limits = Limits(args.token_budget, args.prefill_budget or args.token_budget, args.kv_capacity, args.max_running)
        return load_trace_csv(args.instance, args.cost_model, limits, first=args.first, offline=args.offline)
    return load_instance(args.instance)


def handler(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    if args.time_limit is not None and args.time_limit <= 0:
        raise BadInput(f"--time-limit: must be > 0, got {args.time_limit}")
    policies = None
    if args.policies:
        policies = [p.strip() for p in args.policies.split(",") if p.strip()]
        unknown = [p for p in policies if p not in POLICIES]
        if unknown:
            raise BadInput(f"--policies: unknown policy {unknown[0]!r} (known: {', '.join(sorted(POLICIES))})")
    instance = _load(args)
    reserve = 0.0
    if args.html:
        reserve = min(30.0, max(2.0, HTML_RESERVE_PER_REQUEST * len(instance.requests)), args.time_limit / 3)
    progress = Progress(not args.quiet)
    elapsed = time.perf_counter() - t0
    report = build_report(
        instance,
        objective=args.objective,
        time_limit=args.time_limit - elapsed,
        policies=policies,
        solve_problem=args.problem,
        solve_max_requests=args.solve_max_requests,
        reserve=reserve,
        progress=progress,
    )
    report.time_limit = args.time_limit
    if args.html:
        progress(f"writing {args.html}")
        write_html(report, args.html)
    report.wall_time = time.perf_counter() - t0
    if args.json:
        print_json(report_to_dict(report))
    else:
        print(report_table(report))
    progress(f"done in {report.wall_time:.1f}s")
    return 0
