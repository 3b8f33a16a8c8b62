"""``optsched solve INSTANCE --problem NAME [options] [--out SCHEDULE] [--json]``.

Dispatches to the formulation registered for NAME in :data:`optsched.problems.SOLVERS` with the
options given on the command line: ``--solver``, ``--time-limit``, ``--threads``, ``--objective``,
``--no-evict``, ``--method``, ``--log``, ``--warm-start`` and every ``--option KEY=VALUE`` (VALUE
parsed as JSON when it parses, else kept as a string), read by the formulation's options dataclass
before any work: an option it does not have, a wrong value or an option without effect is bad
input (exit 2). A schedule the solver returns is replayed here again (it must be feasible:
otherwise exit 3) and written to ``--out`` only then; ``--out`` and ``--requests-out`` with a
problem that returns no schedule (:data:`optsched.problems.NO_SCHEDULE`) are bad input.

Exit codes: 0 for ``optimal``, ``feasible`` and ``time_limit``; 1 for ``infeasible``; 2 for an
unknown problem and for ``unsupported`` (the formulation does not accept this instance); 3 for an
internal error (including status ``error``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from importlib import import_module
from typing import Any

from .. import problems
from ..interrupt import interruptible
from ..options import OptionError
from ..request_table import write_request_table
from ..result import SolveResult, Status
from ..schedule import replay
from ._common import (
    EXIT_BAD_INPUT,
    EXIT_INTERNAL,
    EXIT_NO,
    EXIT_OK,
    BadInput,
    add_instance_arguments,
    add_json_flag,
    add_requests_out_flag,
    check_output_path,
    check_requests_out,
    format_mapping,
    load_instance_arg,
    positive_float,
    positive_int,
    print_json,
    time_left,
)

#: Replayed metrics shown under the solve's summary when it returned a schedule.
SUMMARY_METRICS = ("makespan", "mean_latency", "ttft_p99", "tpot_p99", "latency_p99", "goodput")


def add_problem_options(p: argparse.ArgumentParser) -> None:
    """The options passed to solvers and bounders in their ``options`` dict."""
    g = p.add_argument_group("solver options (passed to the formulation)")
    g.add_argument("--solver", metavar="NAME", help="backend, e.g. cpsat, highs, cbc, gurobi (formulation default)")
    g.add_argument("--time-limit", type=positive_float, metavar="S", help="wall-clock limit in seconds")
    g.add_argument("--threads", type=positive_int, metavar="N", help="solver threads")
    g.add_argument("--objective", metavar="NAME", help="objective (formulation-specific, e.g. makespan)")
    g.add_argument("--no-evict", action="store_true", help="forbid evictions")
    g.add_argument("--method", metavar="NAME", help="method variant (formulation-specific)")
    g.add_argument("--warm-start", metavar="POLICY", help="start from this policy's schedule")
    g.add_argument("--log", action="store_true", help="show the solver's log on stderr")
    g.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra formulation option (repeatable; VALUE as JSON when it parses)",
    )


#: ``--option`` keys that also have a flag of their own, with that flag's type.
TYPED_OPTIONS = {"threads": positive_int, "time_limit": positive_float}


#: The flags of :func:`add_problem_options`, by option name.
FLAG_OPTIONS = ("solver", "time_limit", "threads", "objective", "no_evict", "method", "log", "warm_start")


def options_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The options given on the command line (flags left out are not in it)."""
    options: dict[str, Any] = {
        key: getattr(args, key) for key in FLAG_OPTIONS if getattr(args, key) not in (None, False)
    }
    for item in args.option:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise BadInput(f"--option: expected KEY=VALUE, got {item!r}")
        key = key.replace("-", "_")
        if key in TYPED_OPTIONS:  # a key with its own flag is read as that flag reads it
            try:
                options[key] = TYPED_OPTIONS[key](value)
            except argparse.ArgumentTypeError as exc:
                raise BadInput(f"--option {key}: {exc}") from None
            continue
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    return options


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("solve", help="solve a formulation (optimal schedule, or best found with a proven bound)")
    add_instance_arguments(p)
    p.add_argument("--problem", required=True, metavar="NAME", help="formulation (see optsched.problems.SOLVERS)")
    add_problem_options(p)
    p.add_argument("--out", metavar="FILE", help="write the schedule here, JSON or .parquet (after it replays cleanly)")
    add_requests_out_flag(p, "the returned schedule")
    add_json_flag(p)
    p.set_defaults(func=handle)


#: The library each ``--solver`` loads (CP-SAT's import takes about a second: it loads pandas).
BACKEND_MODULES = {"cpsat": "ortools.sat.python.cp_model", "highs": "pulp", "cbc": "pulp", "gurobi": "pulp"}


def resolve(kind: str, name: str, solver: str | None = None) -> Any:
    """``problems.solver_for`` / ``bounder_for``, an unknown name being bad input. The modules the
    formulation declares it needs (``SOLVE_MODULES``: compiled kernels, its solver libraries) and
    the ``solver``'s library are imported here, and a solve's start-up work done (the formulation
    module's ``prepare()``, where it has one), before the formulation's clock starts, so that the
    command's time limit (which counts from the program's start) covers them."""
    try:
        found = problems.solver_for(name) if kind == "solve" else problems.bounder_for(name)
    except KeyError as exc:
        raise BadInput(f"--problem: {exc.args[0]}") from None
    formulation = sys.modules.get(found.__module__)
    modules = [*getattr(formulation, "SOLVE_MODULES", ()), BACKEND_MODULES.get(solver or "")]
    for module in filter(None, modules):
        import_module(module)
    if kind == "solve" and callable(prepare := getattr(formulation, "prepare", None)):
        prepare()
    return found


def with_time_left(options: Any, args: argparse.Namespace) -> Any:
    """``options`` (a dict or an options dataclass) with its ``time_limit`` replaced by what is left
    of it since the program's start (:func:`~._common.time_left`)."""
    limit = options.get("time_limit") if isinstance(options, dict) else getattr(options, "time_limit", None)
    if limit is None:
        return options
    left = time_left(args, limit)
    return (
        {**options, "time_limit": left} if isinstance(options, dict) else dataclasses.replace(options, time_limit=left)
    )


def check_solver_option(problem: str, solver: str | None) -> None:
    """``problems.check_backend``, an unusable ``--solver`` being bad input."""
    try:
        problems.check_backend(problem, solver)
    except ValueError as exc:
        raise BadInput(f"--solver: {exc}") from None


def problem_options(problem: str, kind: str, args: argparse.Namespace) -> Any:
    """The command line's options read by the problem's options dataclass (``kind``: ``"solve"`` or
    ``"bound"``); a wrong one is bad input, before any work."""
    options = options_from_args(args)
    cls = problems.options_for(problem, kind)
    if cls is None:  # a formulation registered without a dataclass reads its options itself
        return options
    try:
        return cls.parse(options)
    except OptionError as exc:
        raise BadInput(str(exc)) from None


def check_schedule_outputs(problem: str, args: argparse.Namespace) -> None:
    """``--out`` and ``--requests-out`` need a schedule: bad input for a problem that returns none."""
    if problem not in problems.NO_SCHEDULE:
        return
    for flag, value in (("--out", args.out), ("--requests-out", args.requests_out)):
        if value is not None:
            raise BadInput(
                f"{flag}: problem {problem!r} returns no schedule (its answer is in the JSON output, --json)"
            )


def handle(args: argparse.Namespace) -> int:
    solve = resolve("solve", args.problem, args.solver)
    check_solver_option(args.problem, args.solver)
    options = problem_options(args.problem, "solve", args)
    check_schedule_outputs(args.problem, args)
    check_requests_out(args.requests_out)
    check_output_path(args.out, args.requests_out)
    instance = load_instance_arg(args)
    options = with_time_left(options, args)
    with interruptible() as ctrl_c:  # Ctrl-C: the best schedule and bound so far, as at the time limit
        result: SolveResult = solve(instance, options)
    if ctrl_c.happened:
        print("optsched: interrupted: reporting the best schedule and bound found so far", file=sys.stderr)
    if result.schedule is not None:
        replayed = result.replay if result.replay is not None else replay(instance, result.schedule)
        if not replayed.feasible:
            raise RuntimeError(
                f"{args.problem}/{result.solver} returned a schedule that does not replay cleanly: "
                + "; ".join(replayed.violations[:3])
            )
        result.replay = replayed
        if args.out is not None:
            result.schedule.save(args.out)
        if args.requests_out is not None:
            write_request_table(args.requests_out, replayed)
    elif args.requests_out is not None:
        print(
            f"optsched: note: no schedule returned ({result.status}): {args.requests_out} not written", file=sys.stderr
        )
    out = result.to_dict(args.out if result.schedule is not None else None)
    out["instance"] = instance.name
    if ctrl_c.happened:
        out["interrupted"] = True
    if args.json:
        print_json(out)
    else:
        metrics = out.get("metrics") or {}
        named = {"objective": f"objective ({out['objective_name']})"} if out.get("objective_name") else {}
        print(
            format_mapping(
                [
                    (named.get(k, k), out[k])
                    for k in (
                        "instance",
                        "problem",
                        "solver",
                        "status",
                        "objective",
                        "bound",
                        "gap",
                        "wall_time",
                        "schedule",
                    )
                ]
                + [(k, metrics[k]) for k in SUMMARY_METRICS if k in metrics]
            )
        )
    if result.status == Status.INFEASIBLE:
        return EXIT_NO
    if result.status == Status.UNSUPPORTED:
        note = result.message or "see the formulation's docs"
        print(
            f"optsched: error: {args.instance}: problem {args.problem!r} does not support this instance ({note})",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    if result.status == Status.ERROR:
        return EXIT_INTERNAL
    return EXIT_OK
