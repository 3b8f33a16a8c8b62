"""``optsched simulate INSTANCE --policy NAME|all [--out SCHEDULE] [--json]``.

Runs a baseline policy (``optsched.policies``) and replays its schedule; the metrics shown are the
replay's. A schedule that does not replay cleanly is a bug of the policy (exit 3). ``--policy all``
runs every registered policy and prints one table row (or JSON entry) per policy.
"""

from __future__ import annotations

import argparse
from typing import Any

from .. import policies
from ..instance import Instance, InstanceError
from ..progress import Progress
from ..request_table import write_request_table
from ..schedule import ReplayResult, Schedule, replay
from ..textable import metric_pairs
from ._common import (
    EXIT_OK,
    BadInput,
    add_instance_arguments,
    add_json_flag,
    add_requests_out_flag,
    check_output_path,
    check_requests_out,
    format_mapping,
    format_table,
    load_instance_arg,
    print_json,
)

METRIC_COLUMNS = (
    "makespan",
    "mean_latency",
    "latency_p99",
    "mean_ttft",
    "ttft_p99",
    "mean_tpot",
    "tpot_p99",
    "throughput",
    "goodput",
    "evictions",
    "slo_attainment",
    "G",
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("simulate", help="run a baseline scheduling policy and replay its schedule")
    add_instance_arguments(p)
    p.add_argument("--policy", required=True, metavar="NAME", help="policy name, or 'all' to compare every policy")
    p.add_argument("--out", metavar="SCHEDULE", help="write the schedule here, JSON or .parquet (single policy only)")
    add_requests_out_flag(p, "the replayed schedule (single policy only)")
    add_json_flag(p)
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=handle)


class PolicyBug(RuntimeError):
    """A policy produced a schedule that does not replay cleanly."""


def run_policy(instance: Instance, name: str) -> tuple[Schedule, ReplayResult]:
    """Simulate ``name`` on ``instance`` and replay the schedule (PolicyBug when it is infeasible)."""
    schedule = policies.simulator_for(name)(instance)
    result = replay(instance, schedule)
    if not result.feasible:
        raise PolicyBug(f"policy {name!r} produced an infeasible schedule: " + "; ".join(result.violations[:3]))
    return schedule, result


def _policy_names(arg: str) -> list[str]:
    known = policies.policy_names()
    if arg == "all":
        if not known:
            raise BadInput("--policy all: no policy is registered")
        return known
    if arg not in known:
        raise BadInput(f"--policy: unknown policy {arg!r} (known: {', '.join(known) or 'none'})")
    return [arg]


def _in_units(metrics: dict[str, Any]) -> list[Any]:
    """The :data:`METRIC_COLUMNS` of ``metrics``, each in the unit its header names."""
    return [value for _, value in metric_pairs({c: metrics[c] for c in METRIC_COLUMNS})]


def handle(args: argparse.Namespace) -> int:
    names = _policy_names(args.policy)
    for flag, value in (("--out", args.out), ("--requests-out", args.requests_out)):
        if value is not None and len(names) > 1:
            raise BadInput(f"{flag}: needs a single --policy, not 'all'")
    check_requests_out(args.requests_out)
    check_output_path(args.out, args.requests_out)
    with Progress(
        "simulate", len(names), "policies", enabled=not args.quiet, started=getattr(args, "started", None)
    ) as bar:
        bar.doing(f"loading {args.instance}")
        instance = load_instance_arg(args)
        bar.doing(f"simulating {len(names)} policies on {len(instance.requests)} requests")
        rows, skipped = _simulate(args, instance, names, bar)
    return _output(args, instance, rows, skipped)


def _simulate(
    args: argparse.Namespace, instance: Instance, names: list[str], bar: Progress
) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """Run and replay each policy, writing the files asked for; (rows, policies skipped)."""
    rows: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    for name in names:
        bar.doing(name)
        try:
            schedule, result = run_policy(instance, name)  # PolicyBug -> exit 3 (cli.main)
        except InstanceError as exc:
            if args.policy != "all":
                raise
            skipped.append({"policy": name, "reason": str(exc)})  # not applicable to this instance
            continue
        assert result.metrics is not None
        if args.out is not None:
            schedule.save(args.out)
        if args.requests_out is not None:
            write_request_table(args.requests_out, result)
        rows.append({"policy": name, "metrics": result.metrics.to_dict(), "schedule": args.out})
        bar.advance()
    return rows, skipped


def _output(
    args: argparse.Namespace, instance: Instance, rows: list[dict[str, Any]], skipped: list[dict[str, str]]
) -> int:
    single = args.policy != "all"
    if args.json:
        if single:
            print_json({"instance": instance.name, **rows[0]})
        else:
            print_json({"instance": instance.name, "policy": "all", "results": rows, "skipped": skipped})
    elif single:
        row = rows[0]
        print(f"instance {instance.name}, policy {row['policy']}")
        print(format_mapping([*metric_pairs(row["metrics"]), ("schedule", row["schedule"])]))
    else:
        print(f"instance {instance.name}: {len(instance.requests)} requests, cost model {instance.cost_model.name}")
        print(
            format_table(
                ("policy", *(label for label, _ in metric_pairs(dict.fromkeys(METRIC_COLUMNS, 0.0))), "batches"),
                [(r["policy"], *_in_units(r["metrics"]), r["metrics"]["batches"]) for r in rows],
            )
        )
        for row in skipped:
            print(f"skipped {row['policy']}: {row['reason']}")
    return EXIT_OK
