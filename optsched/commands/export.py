"""``optsched export SCHEDULE --format NAME --out FILE [--instance INSTANCE] [instance options]``.

The schedule is replayed on its instance first; a schedule with violations, or one the target engine
cannot execute as written, is refused (exit 1, the reason on stderr naming the batch/step and the
request). The instance is ``--instance`` (a JSON path, a shipped name or a trace file), or else the
instance the schedule names in its ``"instance"`` field, loaded as a shipped name or path; the
instance options of the other commands apply to it (``--cost-model``, the limits, ``--first``,
``--rate-scale``, ...; the trace's format is ``--trace-format``), so that a schedule of a trace
file exports in one command.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..export import EXPORTERS, exporter_for
from ..export.vllm_replay import MAX_BLOCK_SIZE, MAX_PLAN_BLOCKS, PlanError
from ..instance import InstanceError
from ..jsonio import write_json_atomic
from ..schedule import load_schedule
from ._common import (
    EXIT_NO,
    BadInput,
    add_instance_arguments,
    check_output_path,
    check_schedule_ids,
    load_instance_arg,
    print_json,
    strict_int,
    warn_other_instance,
)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "export",
        help="export a replay-checked schedule (vllm-replay plan, chrome-trace for Chrome/Perfetto)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("schedule", help="schedule file: JSON, or Parquet (.parquet) (docs/schedule.md)")
    p.add_argument("--format", required=True, choices=sorted(EXPORTERS), help="export format")
    p.add_argument("--out", required=True, help="file to write")
    p.add_argument(
        "--instance",
        metavar="INSTANCE",
        help="instance JSON, shipped name or trace file (default: the schedule's 'instance')",
    )
    add_instance_arguments(p, positional=False, format_flag="--trace-format")
    p.add_argument(
        "--block-size",
        type=strict_int,
        default=None,
        help=f"vllm-replay: KV block size in tokens, 1 to {MAX_BLOCK_SIZE:,} (default 16)",
    )
    p.add_argument(
        "--kv-blocks",
        type=strict_int,
        default=None,
        help="vllm-replay: usable KV blocks for the engine (default floor(M / block size))",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    check_output_path(args.out)
    _check_options(args)
    schedule = load_schedule(args.schedule)
    given = args.instance is not None
    args.instance = args.instance or schedule.instance
    if not args.instance:
        raise BadInput(f"{args.schedule}: field 'instance': empty; pass --instance")
    try:
        instance = load_instance_arg(args)
    except InstanceError as exc:
        if given:
            raise
        raise BadInput(
            f"{args.schedule}: field 'instance': cannot load {args.instance!r} ({exc}); pass --instance"
        ) from None
    check_schedule_ids(instance, schedule, args.schedule)  # an unknown request is bad input, as in check
    warn_other_instance(instance, schedule, args.schedule, "exporting it with")
    options = {"block_size": args.block_size, "kv_blocks": args.kv_blocks} if args.format == "vllm-replay" else {}
    try:
        data = exporter_for(args.format)(instance, schedule, options)
    except PlanError as exc:
        print(f"optsched: export refused: {exc}", file=sys.stderr)
        if args.json:
            print_json({"format": args.format, "exported": False, "reason": str(exc), "out": None})
        return EXIT_NO
    write_json_atomic(args.out, data)
    summary = {"format": args.format, "exported": True, "out": args.out, "instance": instance.name}
    if "traceEvents" in data:
        summary["events"] = len(data["traceEvents"])
        summary["makespan"] = data["otherData"]["makespan"]
        line = f"{summary['events']} trace events, makespan {summary['makespan']:.6g} s"
    else:
        summary.update(
            steps=len(data.get("steps", [])), predicted_total=data.get("predicted_total"), engine=data.get("engine")
        )
        line = f"{summary['steps']} steps, predicted {summary['predicted_total']:.6g} s"
    if args.json:
        print_json(summary)
    else:
        print(f"wrote {args.out}: {line}")
    return 0


def _check_options(args: argparse.Namespace) -> None:
    """Refuse an export option out of range or without effect (neither format carries SLOs; the
    block options shape only a vllm-replay plan), before anything is read."""
    for flag, value in (("--slo-ttft", args.slo_ttft), ("--slo-tpot", args.slo_tpot)):
        if value is not None:
            raise BadInput(f"{flag}: export writes no SLOs (neither format carries them); leave it out")
    if args.block_size is not None and not 1 <= args.block_size <= MAX_BLOCK_SIZE:
        raise BadInput(f"--block-size: must be from 1 to {MAX_BLOCK_SIZE:,}, got {args.block_size}")
    if args.kv_blocks is not None and not 1 <= args.kv_blocks <= MAX_PLAN_BLOCKS:
        raise BadInput(f"--kv-blocks: must be from 1 to {MAX_PLAN_BLOCKS:,}, got {args.kv_blocks}")
    if args.format != "vllm-replay":
        given = [
            flag for flag, v in (("--block-size", args.block_size), ("--kv-blocks", args.kv_blocks)) if v is not None
        ]
        if given:
            raise BadInput(f"{given[0]}: applies only to --format vllm-replay")
