"""Helpers shared by the subcommands: exit codes, bad input, JSON output, INSTANCE arguments, tables.

Exit codes (docs/cli.md): :data:`EXIT_OK` success, :data:`EXIT_NO` the answer is "no"
(infeasible), :data:`EXIT_BAD_INPUT` bad input (one line on stderr naming the file and field),
:data:`EXIT_INTERNAL` internal error. With ``--json`` a command prints exactly one JSON object on
stdout, through :func:`print_json`.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, TextIO, TypeVar

from ..budget import TimeBudget
from ..costmodel import CostModelError, available_profiles, load_cost_model
from ..instance import MAX_LIMIT, MAX_RUNNING, Instance, Limits, check_requests, load_instance
from ..integers import NumberSyntaxError, parse_int
from ..jsonio import finite_json, output_target
from ..request_table import TableError, check_table_path
from ..schedule import Schedule
from ..textable import format_value, text_table
from ..workload import (
    FORMATS,
    WorkloadError,
    WorkloadTransforms,
    apply_transforms,
    is_trace_path,
    load_trace,
    parse_window,
)
from ..workload.transforms import MAX_SEED

T = TypeVar("T")

EXIT_OK, EXIT_NO, EXIT_BAD_INPUT, EXIT_INTERNAL = 0, 1, 2, 3


class BadInput(ValueError):
    """Raised by handlers for bad command-line input (exit code 2)."""


#: Where :func:`print_json` writes while :func:`stdout_reserved_for_json` is active.
_json_stream: TextIO | None = None


def print_json(obj: Any) -> None:
    """Print one JSON object on stdout (the only thing ``--json`` prints there)."""
    stream = _json_stream or sys.stdout
    stream.write(json.dumps(finite_json(obj), indent=1) + "\n")
    stream.flush()


def _fileno(stream: TextIO) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, OSError, io.UnsupportedOperation):
        return None


@contextmanager
def stdout_reserved_for_json() -> Iterator[None]:
    """Send everything but :func:`print_json` to stderr while a ``--json`` command runs.

    Solver libraries print banners on their own (Gurobi's licence line, from C code, straight to
    file descriptor 1); with ``--json`` stdout must hold the one JSON object and nothing else.
    """
    global _json_stream
    real = sys.stdout
    real.flush()
    out_fd, err_fd = _fileno(real), _fileno(sys.stderr)
    saved_fd = None
    if out_fd is not None and err_fd is not None:
        saved_fd = os.dup(out_fd)
        os.dup2(err_fd, out_fd)
        _json_stream = os.fdopen(os.dup(saved_fd), "w")
    else:
        _json_stream = real
    sys.stdout = sys.stderr
    try:
        yield
    finally:
        sys.stdout = real
        _json_stream.flush()
        if saved_fd is not None:
            _json_stream.close()
            os.dup2(saved_fd, out_fd)  # type: ignore[arg-type]
            os.close(saved_fd)
        _json_stream = None


_LIMIT_OPTIONS = ("token_budget", "prefill_budget", "kv_capacity", "max_running")


def strict_int(text: str) -> int:
    """argparse type: an integer of :mod:`optsched.integers`' grammar (ASCII digits, a sign)."""
    try:
        return parse_int(text, signed=True)
    except NumberSyntaxError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    value = strict_int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def count_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    value = strict_int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def seed_int(text: str) -> int:
    """argparse type: a random seed, an integer from 0 to :data:`~optsched.workload.transforms.MAX_SEED`."""
    value = strict_int(text)
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"must be an integer from 0 to 2**63 - 1, got {value}")
    return value


def torch_device(text: str) -> str:
    """argparse type of a PyTorch ``--device``: ``cpu``, ``cuda`` or ``cuda:N``."""
    kind, sep, index = text.partition(":")
    if text == "cpu" or kind == "cuda" and (not sep or index.isascii() and index.isdigit()):
        return text
    raise argparse.ArgumentTypeError(f"expected cpu, cuda or cuda:N, got {text!r}")


def limit_int(text: str) -> int:
    """argparse type: a token limit, an integer from 1 to :data:`optsched.instance.MAX_LIMIT`."""
    value = positive_int(text)
    if value > MAX_LIMIT:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_LIMIT:.0e}, got {text}")
    return value


def running_int(text: str) -> int:
    """argparse type: ``max_running``, an integer from 1 to :data:`optsched.instance.MAX_RUNNING`."""
    value = positive_int(text)
    if value > MAX_RUNNING:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_RUNNING:.0e}, got {text}")
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


def nonempty_text(text: str) -> str:
    """argparse type: a name of at least one character."""
    if not text:
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def check_profile_out(path: str | None, *others: str | None) -> None:
    """``--out`` of a command that writes a cost-model profile: a ``.toml`` file (as ``--cost-model``
    reads it), writable and not the same file as the command's ``others`` outputs (:func:`check_output_path`)."""
    check_output_path(path, *others)
    if path is not None and not path.endswith(".toml"):
        raise BadInput(f"--out: a profile is a .toml file (as --cost-model reads it), got {path!r}")


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")


def add_instance_arguments(
    parser: argparse.ArgumentParser, *, positional: bool = True, format_flag: str = "--format"
) -> None:
    """INSTANCE, the options that build or override an instance, and the workload transforms.

    ``positional=False`` leaves INSTANCE to the caller (e.g. an ``--instance`` option);
    ``format_flag`` names the trace-format option where ``--format`` means something else.
    """
    if positional:
        parser.add_argument(
            "instance",
            metavar="INSTANCE",
            help="instance JSON file, name of a shipped instance (e.g. toy-4), or a trace file "
            "(.csv or .jsonl, also .gz; formats in docs/instances.md)",
        )
    group = parser.add_argument_group(
        "instance options",
        "required for a trace (--cost-model) and overriding a JSON instance's values otherwise",
    )
    group.add_argument(
        format_flag,
        dest="trace_format",
        choices=list(FORMATS),
        metavar="FORMAT",
        help=f"trace format ({', '.join(FORMATS)}; default: detected from the header)",
    )
    group.add_argument(
        "--model",
        dest="trace_model",
        metavar="NAME",
        help="keep only this model's rows of a trace with a model column (burstgpt)",
    )
    group.add_argument(
        "--cost-model", metavar="PROFILE", help=f"profile name ({', '.join(available_profiles())}) or .toml file"
    )
    group.add_argument("--token-budget", type=limit_int, metavar="C", help="tokens per batch")
    group.add_argument("--prefill-budget", type=limit_int, metavar="P", help="prefill tokens per batch (default C)")
    group.add_argument("--kv-capacity", type=limit_int, metavar="M", help="KV-cache slots in tokens")
    group.add_argument("--max-running", type=running_int, metavar="R", help="requests holding KV at once")
    add_transform_arguments(parser)


def add_transform_arguments(parser: argparse.ArgumentParser) -> None:
    """The workload transforms (:mod:`optsched.workload.transforms`), applied in its order."""
    group = parser.add_argument_group(
        "workload transforms",
        "applied in this order: --first, --window, --sample, --rate-scale, --clip-prompt/--clip-output, "
        "--offline, --slo-ttft/--slo-tpot (docs/instances.md)",
    )
    group.add_argument("--first", type=positive_int, metavar="N", help="keep only the first N requests")
    group.add_argument(
        "--window",
        type=_window,
        metavar="START:END",
        help="keep requests arriving in [START, END) seconds, shifted to start at 0",
    )
    group.add_argument(
        "--sample",
        type=_fraction,
        metavar="FRACTION",
        help="keep this fraction of the requests, drawn at random (with --seed)",
    )
    group.add_argument("--seed", type=seed_int, metavar="S", help="seed of --sample, an integer >= 0 (default 0)")
    group.add_argument(
        "--rate-scale", type=positive_float, metavar="X", help="divide arrival times by X (2 = twice the traffic)"
    )
    group.add_argument("--clip-prompt", type=positive_int, metavar="N", help="prompt lengths above N become N")
    group.add_argument("--clip-output", type=positive_int, metavar="N", help="output lengths above N become N")
    group.add_argument("--offline", action="store_true", help="ignore arrival times (all arrive at 0)")
    group.add_argument(
        "--slo-ttft", type=positive_float, metavar="SECONDS", help="TTFT SLO of every request that has none"
    )
    group.add_argument(
        "--slo-tpot", type=positive_float, metavar="SECONDS", help="TPOT SLO of every request that has none"
    )


def _window(text: str) -> tuple[float, float]:
    try:
        return parse_window(text)
    except WorkloadError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--window: ")) from None


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be a fraction in (0, 1], got {text}")
    return value


def transforms_from_args(args: argparse.Namespace) -> WorkloadTransforms:
    """The :class:`WorkloadTransforms` of the command line (``--seed`` without ``--sample`` is bad input)."""
    if args.seed is not None and args.sample is None:
        raise BadInput("--seed: only applies with --sample")
    return WorkloadTransforms(
        first=args.first,
        window=args.window,
        sample=args.sample,
        seed=args.seed,
        rate_scale=args.rate_scale,
        clip_prompt=args.clip_prompt,
        clip_output=args.clip_output,
        offline=args.offline,
        slo_ttft=args.slo_ttft,
        slo_tpot=args.slo_tpot,
    )


def _limits_from_args(args: argparse.Namespace, base: Limits) -> Limits:
    """``base`` with the limit options applied; lowering C alone lowers P to at most C."""
    given = {k: getattr(args, k) for k in _LIMIT_OPTIONS if getattr(args, k) is not None}
    if "token_budget" in given and "prefill_budget" not in given:
        given["prefill_budget"] = min(base.prefill_budget, given["token_budget"])
    limits = replace(base, **given)
    if limits.prefill_budget > limits.token_budget:
        raise BadInput(
            f"--prefill-budget: {limits.prefill_budget} exceeds the token budget {limits.token_budget} (P <= C)"
        )
    return limits


def load_instance_arg(args: argparse.Namespace, *, check_capacity: bool = True) -> Instance:
    """The instance named by ``args.instance`` with the instance options and transforms applied.

    A trace file (``.csv``, ``.jsonl``, also ``.gz``) is read by :func:`~optsched.workload.load_trace`
    (``--cost-model`` required; limits from the options, contract defaults otherwise; its notes go
    to stderr). Options given with a JSON instance override its values. The workload transforms
    apply after loading; the result is checked like a loaded instance (unique ids, every request
    able to fit in M).
    """
    path = args.instance
    transforms = transforms_from_args(args)
    overrides = [args.cost_model, *(getattr(args, k) for k in _LIMIT_OPTIONS)]
    if is_trace_path(path) or args.trace_format is not None:
        base = _load_trace_arg(args, transforms)
    else:
        if args.trace_model is not None:
            raise BadInput("--model: applies only to a trace file")
        if all(v is None for v in overrides) and transforms.is_identity:
            return load_instance(path, check_capacity=check_capacity)
        base = load_instance(path, check_capacity=False)
    instance = apply_transforms(base, transforms, source=path)
    cost = base.cost_model
    if args.cost_model is not None:
        try:
            cost = load_cost_model(args.cost_model)
        except CostModelError as exc:
            raise BadInput(f"--cost-model: {exc}") from None
    instance = replace(instance, cost_model=cost, limits=_limits_from_args(args, base.limits))
    check_requests(instance.requests, instance.limits, path, check_capacity, check_ids=False)  # checked at load
    return instance


def _load_trace_arg(args: argparse.Namespace, transforms: WorkloadTransforms) -> Instance:
    """The trace file of ``args.instance`` (only its first rows with ``--first``), notes on stderr."""
    path = args.instance
    if args.cost_model is None:
        raise BadInput(f"{path}: a trace file needs --cost-model (profiles: {', '.join(available_profiles())})")
    options = {} if args.trace_model is None else {"model": args.trace_model}
    base = load_trace(
        path, args.cost_model, format=args.trace_format, max_rows=transforms.first, check_capacity=False, **options
    )
    for note in base.extra.get("notes", ()):
        print(f"optsched: note: {note}", file=sys.stderr)
    return base


def warn_other_instance(instance: Instance, schedule: Schedule, source: str, doing: str) -> None:
    """A warning on stderr when the schedule names another instance than the one it is ``doing``
    (checked against, exported with): its request ids match (:func:`check_schedule_ids`), its
    traffic may not."""
    if schedule.instance and schedule.instance != instance.name:
        print(
            f"optsched: warning: {source} was made for instance {schedule.instance!r}, {doing} {instance.name!r}",
            file=sys.stderr,
        )


def check_schedule_ids(instance: Instance, schedule: Schedule, source: str) -> None:
    """Bad input (exit 2) when a schedule names a request the instance does not have.

    Such a schedule belongs to another instance; this is reported as an input error, not as a
    semantic violation (which :func:`~optsched.schedule.replay` would also list).
    """
    try:
        if all(rid in instance for rid in schedule.columns().ids):  # no Batch object built
            return
    except OverflowError:  # a token count beyond 64 bits (replay names it): check the ids below
        pass
    for j, batch in enumerate(schedule.batches):
        for rid in [*batch.evict, *(it.id for it in batch.items)]:
            if rid not in instance:
                raise BadInput(
                    f"{source}: batch {j}: request {rid!r}: unknown request (not in instance {instance.name!r})"
                )


def format_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A plain-text table: numbers right-aligned, text left-aligned (:func:`optsched.textable.text_table`)."""
    return text_table(headers, rows)


def format_mapping(pairs: Iterable[tuple[str, Any]]) -> str:
    items = list(pairs)
    width = max((len(k) for k, _ in items), default=0)
    return "\n".join(f"{k.ljust(width)}  {format_value(v)}" for k, v in items)


def add_requests_out_flag(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--requests-out",
        metavar="FILE",
        help=f"write one row per request of {what} (CSV, or Parquet for .parquet; docs/schedule.md)",
    )


def check_requests_out(path: str | None) -> None:
    """Fail early (bad input) when ``--requests-out`` cannot be written."""
    if path is None:
        return
    check_output_path(path)
    try:
        check_table_path(path)
    except TableError as exc:
        raise BadInput(f"--requests-out: {exc}") from None


def command_budget(args: argparse.Namespace, limit: float | None) -> TimeBudget:
    """A command's time budget: its time limit ``limit`` in seconds (None: none) from
    ``args.started``, the start of the program (the interpreter's start-up and the imports count),
    less :data:`EXIT_RESERVE`."""
    return TimeBudget.of(limit, start=getattr(args, "started", None)).reserve(EXIT_RESERVE)


def time_left(args: argparse.Namespace, limit: float | None) -> float | None:
    """What is left of :func:`command_budget`, at least :data:`LEAST_TIME_LEFT`; None without a limit."""
    return command_budget(args, limit).left(LEAST_TIME_LEFT)


#: Seconds of a command's time limit kept for its end: printing the result and the interpreter's
#: exit, which unloads the solver libraries (about 0.6 s after a CP-SAT solve on this project's
#: 2-core machine; the time limit bounds the whole command).
EXIT_RESERVE = 0.3


#: The time a solver still gets when the start-up used the whole limit: enough to return the
#: best schedule it has at once (a policy's), not a crash.
LEAST_TIME_LEFT = 0.05


def check_output_path(*paths: str | None) -> None:
    """Fail early, before any work, when an output file cannot be written
    (:func:`~optsched.jsonio.output_target`: an :class:`~optsched.jsonio.OutputError`, exit 2) or
    two outputs name the same file; None stands for an output not asked for."""
    seen: dict[str, str] = {}
    for path in paths:
        if path is None:
            continue
        target = os.path.realpath(output_target(path))
        if target in seen:
            raise BadInput(f"{path}: the same file as {seen[target]}; give each output its own file")
        seen[target] = path


#: Attributes of a parsed command line that name files or folders the command reads.
INPUT_ARGS = (
    "instance",
    "schedule",
    "plan",
    "result",
    "measurements",
    "spec",
    "dir",
    "cost_model",
    "compare",
    "profile",
    "model",
    "instances",
)

#: Attributes of a parsed command line that name files the command writes (``sweep``'s ``out``
#: is its results folder).
OUTPUT_ARGS = ("out", "requests_out", "html", "plot", "profile_out", "steps_out")


def _inside_store(path: str, folder: str) -> bool:
    """Whether ``path`` names one of the sweep files (``_sweep.json``, ``part-*.parquet``) of ``folder``."""
    from ..sweep.store import is_store_name

    parent = os.path.dirname(os.path.abspath(path))
    return os.path.isdir(folder) and os.path.samefile(parent, folder) and is_store_name(os.path.basename(path))


def _same(output: str, source: str) -> bool:
    """Whether writing ``output`` would replace ``source`` (the same file after links are resolved,
    a hard link included) or one of the sweep files inside the folder ``source``."""
    if os.path.isdir(source):
        return os.path.isdir(os.path.dirname(os.path.abspath(output))) and _inside_store(output, source)
    return os.path.exists(output) and os.path.samefile(output, source)


def check_outputs_are_not_inputs(args: argparse.Namespace) -> None:
    """Bad input (exit 2), before any work, when an output of the command line
    (:data:`OUTPUT_ARGS`) would replace one of its inputs (:data:`INPUT_ARGS`): the same file, or a
    sweep folder's own files; ``sweep``'s results folder must not hold its spec as such a file."""
    inputs = [v for a in INPUT_ARGS if isinstance(v := getattr(args, a, None), str) and os.path.exists(v)]
    sweep_folder = getattr(args, "command", None) == "sweep"
    for name in OUTPUT_ARGS:
        output = getattr(args, name, None)
        if not isinstance(output, str):
            continue
        for source in inputs:
            if sweep_folder and name == "out":
                clash = os.path.isdir(output) and _inside_store(source, output)
            else:
                clash = _same(output, source)
            if clash:
                option = "--" + name.replace("_", "-")
                what = f"a file of the sweep folder {source}" if os.path.isdir(source) else f"the input {source}"
                if sweep_folder and name == "out":
                    what = f"the sweep file {source} that is an input"
                raise BadInput(f"{output}: {option} would replace {what}; write the output elsewhere")


__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_INTERNAL",
    "EXIT_NO",
    "EXIT_OK",
    "BadInput",
    "add_instance_arguments",
    "add_transform_arguments",
    "add_json_flag",
    "add_requests_out_flag",
    "check_requests_out",
    "check_output_path",
    "check_outputs_are_not_inputs",
    "check_schedule_ids",
    "format_mapping",
    "format_table",
    "load_instance_arg",
    "positive_float",
    "positive_int",
    "print_json",
    "count_int",
    "seed_int",
    "warn_other_instance",
    "stdout_reserved_for_json",
    "command_budget",
    "time_left",
    "torch_device",
    "transforms_from_args",
]
