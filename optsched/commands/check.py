"""``optsched check INSTANCE SCHEDULE [--json]``.

Replays the schedule (docs/schedule.md) and reports whether it is feasible, every violation
(each naming batch and request) and, when feasible, the metrics. Exit 0 when feasible, 1 when not.
A schedule that names a request the instance does not have is bad input (exit 2): it was made for
another instance.
"""

from __future__ import annotations

import argparse

from ..request_table import write_request_table
from ..schedule import load_schedule, replay
from ..textable import metric_pairs
from ._common import (
    EXIT_NO,
    EXIT_OK,
    add_instance_arguments,
    add_json_flag,
    add_requests_out_flag,
    check_requests_out,
    check_schedule_ids,
    format_mapping,
    load_instance_arg,
    print_json,
    warn_other_instance,
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check", help="replay a schedule and list its violations (exit 1 if infeasible)")
    add_instance_arguments(p)
    p.add_argument("schedule", metavar="SCHEDULE", help="schedule file: JSON, or Parquet (.parquet)")
    add_requests_out_flag(p, "the replayed schedule (also when infeasible)")
    add_json_flag(p)
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    check_requests_out(args.requests_out)
    instance = load_instance_arg(args)
    schedule = load_schedule(args.schedule)
    check_schedule_ids(instance, schedule, args.schedule)
    warn_other_instance(instance, schedule, args.schedule, "checking it against")
    result = replay(instance, schedule)
    if args.requests_out is not None:
        write_request_table(args.requests_out, result)
    metrics = result.metrics.to_dict() if result.metrics is not None else None
    if args.json:
        print_json({
            "instance": instance.name,
            "feasible": result.feasible,
            "violations": result.violations,
            "metrics": metrics,
        })
    else:
        if result.feasible:
            print(f"feasible: {len(result.ends)} batches, {len(instance.requests)} requests finished")
            assert metrics is not None
            print(format_mapping(metric_pairs(metrics)))
        else:
            print(f"infeasible: {len(result.violations)} violation(s)")
            for v in result.violations:
                print(f"  {v}")
    return EXIT_OK if result.feasible else EXIT_NO
