"""Helpers shared by the subcommands: reading INSTANCE arguments, tables, progress, output."""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence, TypeVar

from ..cli import BadInput
from ..costmodel import available_profiles
from ..instance import Instance, load_instance, load_trace_csv, parse_instance
from ..schedule import Schedule

T = TypeVar("T")

_LIMIT_OPTIONS = ("token_budget", "prefill_budget", "kv_capacity", "max_running")


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")


def add_instance_arguments(parser: argparse.ArgumentParser) -> None:
    """INSTANCE plus the options that build or override an instance (needed for trace CSVs)."""
    parser.add_argument(
        "instance",
        metavar="INSTANCE",
        help="instance JSON file, name of a shipped instance (e.g. toy-4), or a trace CSV "
        "(arrived_at,num_prefill_tokens,num_decode_tokens)",
    )
    group = parser.add_argument_group(
        "instance options",
        "required for a trace CSV (--cost-model) and overriding a JSON instance's values otherwise",
    )
    group.add_argument("--cost-model", metavar="PROFILE", help=f"profile name ({', '.join(available_profiles())}) or .toml file")
    group.add_argument("--token-budget", type=positive_int, metavar="C", help="tokens per batch")
    group.add_argument("--prefill-budget", type=positive_int, metavar="P", help="prefill tokens per batch (default C)")
    group.add_argument("--kv-capacity", type=positive_int, metavar="M", help="KV-cache slots in tokens")
    group.add_argument("--max-running", type=positive_int, metavar="R", help="requests holding KV at once")
    group.add_argument("--first", type=positive_int, metavar="N", help="keep only the first N requests")
    group.add_argument("--offline", action="store_true", help="ignore arrival times (all arrive at 0)")


def load_instance_arg(args: argparse.Namespace, *, check_capacity: bool = True) -> Instance:
    """The instance named by ``args.instance`` with the instance options applied.

    A ``.csv`` is read as a trace (``--cost-model`` required; limits from the options, contract
    defaults otherwise). Options given with a JSON instance override its values; the result is
    validated again like a loaded instance.
    """
    path = args.instance
    if path.endswith(".csv"):
        if args.cost_model is None:
            raise BadInput(f"{path}: a trace CSV needs --cost-model (profiles: {', '.join(available_profiles())})")
        base = load_trace_csv(path, args.cost_model, first=args.first, offline=args.offline, check_capacity=False)
        data = base.to_dict()
        data["limits"] = {}
    else:
        base = load_instance(path, check_capacity=check_capacity)
        overrides = [args.cost_model, args.first, *(getattr(args, k) for k in _LIMIT_OPTIONS)]
        if all(v is None for v in overrides) and not args.offline:
            return base
        data = base.to_dict()
        if args.first is not None:
            data["requests"] = data["requests"][: args.first]
            data["name"] = f"{data['name']}-{args.first}"
        if args.offline:
            data["requests"] = [{**r, "arrival": 0.0} for r in data["requests"]]
    if args.cost_model is not None:
        data["cost_model"] = args.cost_model
    limits = dict(data["limits"])
    given = {k: getattr(args, k) for k in _LIMIT_OPTIONS if getattr(args, k) is not None}
    if "token_budget" in given and "prefill_budget" not in given:
        limits["prefill_budget"] = min(limits.get("prefill_budget") or given["token_budget"], given["token_budget"])
    limits.update(given)
    data["limits"] = limits
    return parse_instance(data, source=path, check_capacity=check_capacity)


def check_schedule_ids(instance: Instance, schedule: Schedule, source: str) -> None:
    """Bad input (exit 2) when a schedule names a request the instance does not have.

    Such a schedule belongs to another instance; this is reported as an input error, not as a
    semantic violation (which :func:`~optsched.schedule.replay` would also list).
    """
    for j, batch in enumerate(schedule.batches):
        for rid in [*batch.evict, *(it.id for it in batch.items)]:
            if rid not in instance:
                raise BadInput(
                    f"{source}: batch {j}: request {rid!r}: unknown request (not in instance {instance.name!r})"
                )


def format_value(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if not math.isfinite(value):
            return "inf"
        return f"{value:.6g}"
    return str(value)


def format_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A plain-text table: numbers right-aligned, text left-aligned."""
    raw = [list(row) for row in rows]
    cells = [list(headers)] + [[format_value(v) for v in row] for row in raw]
    widths = [max(len(r[c]) for r in cells) for c in range(len(headers))]
    numeric = [
        all(isinstance(row[c], (int, float)) or row[c] is None for row in raw) and bool(raw)
        for c in range(len(headers))
    ]

    def line(row: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(row, widths, numeric)).rstrip()

    out = [line(cells[0]), "  ".join("-" * w for w in widths)]
    out.extend(line(r) for r in cells[1:])
    return "\n".join(out)


def format_mapping(pairs: Iterable[tuple[str, Any]]) -> str:
    items = list(pairs)
    width = max((len(k) for k, _ in items), default=0)
    return "\n".join(f"{k.ljust(width)}  {format_value(v)}" for k, v in items)


def progress(items: Sequence[T], label: str) -> Iterator[T]:
    """Yield ``items``, showing ``label i/n: item`` on stderr when stderr is a terminal."""
    show = sys.stderr.isatty()
    t0 = time.perf_counter()
    for k, item in enumerate(items):
        if show:
            sys.stderr.write(f"\r\033[K{label} {k + 1}/{len(items)}: {item}  ({time.perf_counter() - t0:.1f} s)")
            sys.stderr.flush()
        yield item
    if show:
        sys.stderr.write("\r\033[K")
        sys.stderr.flush()


def check_output_path(path: str | None) -> None:
    """Fail early (bad input) when ``--out`` cannot be written, before any long computation."""
    if path is None:
        return
    parent = Path(path).resolve().parent
    if not parent.is_dir():
        raise BadInput(f"{path}: output folder {str(parent)!r} does not exist")


__all__ = [
    "add_instance_arguments",
    "add_json_flag",
    "check_output_path",
    "check_schedule_ids",
    "format_mapping",
    "format_table",
    "load_instance_arg",
    "positive_float",
    "positive_int",
    "progress",
]
