"""``optsched solve INSTANCE --problem NAME [options] [--out SCHEDULE] [--json]``.

Dispatches to the formulation registered for NAME in :data:`optsched.problems.SOLVERS` with the
options given on the command line: ``--solver``, ``--time-limit``, ``--threads``, ``--objective``,
``--no-evict``, ``--method``, ``--log``, ``--warm-start`` and every ``--option KEY=VALUE`` (VALUE
parsed as JSON when it parses, else kept as a string), read by the formulation's options dataclass
before any work: an option it does not have, a wrong value or an option without effect is bad
input (exit 2). The solve goes through :func:`optsched.api.solve`: a schedule the solver returns is
replayed and checked there (:func:`optsched.api.checked`; a schedule that is not feasible: exit 3)
and written to ``--out`` only then; ``--out`` and ``--requests-out`` with a problem that returns no
schedule (:data:`optsched.problems.NO_SCHEDULE`) are bad input.

Exit codes: 0 for ``optimal``, ``feasible`` and ``time_limit``; 1 for ``infeasible``; 2 for an
unknown problem and for ``unsupported`` (the formulation does not accept this instance); 3 for an
internal error (including status ``error``).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from dataclasses import replace
from importlib import import_module
from typing import TYPE_CHECKING, Any

from .. import api, problems
from ..instance import Instance
from ..interrupt import held_signals, interruptible
from ..options import OptionError
from ..progress import Progress
from ..request_table import write_request_table
from ..result import Bound, SolveResult, Status
from ..textable import metric_pairs
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
    command_budget,
    format_mapping,
    load_instance_arg,
    positive_float,
    positive_int,
    print_json,
)

if TYPE_CHECKING:
    from ..budget import TimeBudget
    from ..problems import Formulation

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
    given: set[str] = set()  # the keys of --option
    for item in args.option:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise BadInput(f"--option: expected KEY=VALUE, got {item!r}")
        key = key.replace("-", "_")
        if key in options:
            also = f"--{key.replace('_', '-')}" if key in FLAG_OPTIONS and key not in given else f"--option {key}"
            raise BadInput(f"--option {key}: given twice (also {also}); give it once")
        given.add(key)
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
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=handle)


#: The library each ``--solver`` loads (CP-SAT's import takes about a second: it loads pandas).
BACKEND_MODULES = {"cpsat": "ortools.sat.python.cp_model", "highs": "pulp", "cbc": "pulp", "gurobi": "pulp"}


def known_formulation(name: str) -> Formulation:
    """The registration record of problem ``name`` (:func:`optsched.api.formulation`), nothing
    loaded yet; an unknown name is bad input."""
    try:
        return api.formulation(name)
    except KeyError as exc:
        raise BadInput(f"--problem: {exc.args[0]}") from None


def resolve(kind: str, name: str, solver: str | None = None) -> Formulation:
    """The registration record of problem ``name`` (:func:`optsched.api.formulation`), an unknown
    name being bad input. Its start-up (:meth:`~optsched.problems.Formulation.start_up`: the
    modules it needs, compiled kernels, its solver libraries) and the ``solver``'s library are done
    here, before the formulation's clock starts, so that the command's time limit (which counts
    from the program's start) covers them. Ctrl-C is held meanwhile and raised at the end
    (:func:`optsched.interrupt.held_signals`): an interrupt inside a C extension's import becomes
    an ``ImportError`` that a library's optional import (pandas', under CP-SAT) swallows."""
    record = known_formulation(name)
    with held_signals():
        record.start_up(kind)
        if module := BACKEND_MODULES.get(solver or ""):
            import_module(module)
    return record


def first_answer(record: Formulation, instance: Instance, options: Any, budget: TimeBudget) -> SolveResult | None:
    """The formulation's answer from quick work (:attr:`~optsched.problems.Formulation.first_answer`),
    replayed and checked (:func:`optsched.api.checked`), for a command with a time limit; None
    without a limit or without such an answer."""
    result: SolveResult | None = _quick(record, "first_answer", instance, options, budget)
    return None if result is None else api.checked(instance, result, record.name)


def first_bounds(record: Formulation, instance: Instance, options: Any, budget: TimeBudget) -> list[Bound] | None:
    """The formulation's quick bounds (:attr:`~optsched.problems.Formulation.first_bounds`) for a
    command with a time limit; None without a limit or without such bounds."""
    bounds: list[Bound] | None = _quick(record, "first_bounds", instance, options, budget)
    return bounds


def _quick(record: Formulation, field: str, instance: Instance, options: Any, budget: TimeBudget) -> Any:
    """What the code ``record.<field>`` computes for ``instance``, for a command with a time limit;
    None without a limit or without such code."""
    if getattr(record, field) is None or not budget.limited:
        return None
    return record.load(field)(instance, options, budget)


def first_is_answer(
    record: Formulation, solver: str | None, budget: TimeBudget, first: SolveResult
) -> SolveResult | None:
    """``first`` (:func:`first_answer`) labelled with why it is the command's answer, when the
    solver cannot improve on it in time: it is optimal already (the solver is not loaded), the
    solver's start-up (:func:`started_up_by`) has not ended by the deadline, or the time left then
    is less than ``first`` took (the solve's first phase redoes that work); None when the solve is
    to run."""
    if first.status == Status.OPTIMAL:
        return first
    if not started_up_by(record, solver, budget):
        why = "the solver did not load within the time limit"
    elif not budget.holds(first.wall_time):
        left, took = budget.left(), first.wall_time
        why = f"the solver loaded with {left:.2g} s left, less than the first answer took ({took:.2g} s)"
    else:
        return None
    return replace(first, incumbent=f"{why}; {first.incumbent}")


def started_up_by(record: Formulation, solver: str | None, budget: TimeBudget, kind: str = "solve") -> bool:
    """:func:`resolve`'s start-up of ``record`` (for a ``kind`` command) and the ``solver``'s
    library, run in a thread and waited for until ``budget`` expires (Ctrl-C inside
    :func:`~optsched.interrupt.interruptible` expires it): whether it ended in time. An error of
    the start-up is raised here; a start-up still running is left to the process's end (a thread,
    so that no import or kernel load is interrupted half-way: signals reach the main thread only)."""
    errors: list[BaseException] = []

    def start_up() -> None:
        try:
            resolve(kind, record.name, solver)
        except BaseException as exc:  # noqa: BLE001 - raised in the waiting thread
            errors.append(exc)

    thread = threading.Thread(target=start_up, name="optsched-start-up", daemon=True)
    thread.start()
    while thread.is_alive() and not budget.expired():
        thread.join(min(budget.left(0.001) or START_UP_POLL, START_UP_POLL))
    if thread.is_alive():
        return False
    if errors:
        raise errors[0]
    return True


#: Seconds between two looks at the deadline (and at Ctrl-C) while the start-up runs in its thread.
START_UP_POLL = 0.05


def time_limit_of(options: Any) -> float | None:
    """The option ``time_limit`` of ``options`` (a dict or an options dataclass; None: none)."""
    return options.get("time_limit") if isinstance(options, dict) else getattr(options, "time_limit", None)


def check_solver_option(problem: str, solver: str | None) -> None:
    """``problems.check_backend``, an unusable ``--solver`` being bad input."""
    try:
        problems.check_backend(problem, solver)
    except ValueError as exc:
        raise BadInput(f"--solver: {exc}") from None


def problem_options(record: Formulation, kind: str, args: argparse.Namespace) -> Any:
    """The command line's options read by the problem's options dataclass (``kind``: ``"solve"`` or
    ``"bound"``); a wrong one is bad input, before any work."""
    try:
        return api.parse_options(record.name, kind, options_from_args(args))
    except OptionError as exc:
        raise BadInput(str(exc)) from None


def check_schedule_outputs(record: Formulation, args: argparse.Namespace) -> None:
    """``--out`` and ``--requests-out`` need a schedule: bad input for a problem that returns none."""
    if record.returns_schedule:
        return
    for flag, value in (("--out", args.out), ("--requests-out", args.requests_out)):
        if value is not None:
            raise BadInput(
                f"{flag}: problem {record.name!r} returns no schedule (its answer is in the JSON output, --json)"
            )


def handle(args: argparse.Namespace) -> int:
    limit = args.time_limit
    quiet = getattr(args, "quiet", False) or args.log  # the solver's own log takes stderr
    started = getattr(args, "started", None)
    record = known_formulation(args.problem)
    check_solver_option(args.problem, args.solver)  # bad options and outputs are refused before any work
    options = problem_options(record, "solve", args)
    check_schedule_outputs(record, args)
    check_requests_out(args.requests_out)
    check_output_path(args.out, args.requests_out)
    with Progress("solve", limit, "s", clock=limit is not None, enabled=not quiet, started=started) as progress:
        instance, result, interrupted = _solve(args, options, progress)
    return _output(args, instance, result, interrupted)


def _solve(args: argparse.Namespace, options: Any, progress: Progress) -> tuple[Instance, SolveResult, bool]:
    """Load, solve and replay (the schedule and request files written); (instance, result, interrupted)."""
    progress.doing(f"loading {args.instance}")
    instance = load_instance_arg(args)  # first: a bad instance is refused before the formulation loads
    budget = command_budget(args, time_limit_of(options))  # the whole command's, from the program's start
    record = known_formulation(args.problem)
    first = first_answer(record, instance, options, budget)
    progress.doing(f"loading the {args.problem} formulation (its compiled kernels are built on first use)")
    if first is None:
        resolve("solve", args.problem, args.solver)
    with interruptible() as ctrl_c:  # Ctrl-C: the best schedule and bound so far, as at the time limit
        result = None if first is None else first_is_answer(record, args.solver, budget, first)
        if result is None:
            progress.doing(f"solving {args.problem} on {len(instance.requests)} requests")
            result = api.solve(instance, args.problem, options, budget=budget)  # replayed and checked (api.checked)
    if ctrl_c.happened:
        print("optsched: interrupted: reporting the best schedule and bound found so far", file=sys.stderr)
    if result.schedule is not None and result.replay is not None:
        if args.out is not None:
            result.schedule.save(args.out)
        if args.requests_out is not None:
            write_request_table(args.requests_out, result.replay)
    elif args.requests_out is not None:
        print(
            f"optsched: note: no schedule returned ({result.status}): {args.requests_out} not written", file=sys.stderr
        )
    return instance, result, ctrl_c.happened


def _output(args: argparse.Namespace, instance: Instance, result: SolveResult, interrupted: bool) -> int:
    """Print the result (a listing, or the JSON) and return the exit code."""
    out = result.to_dict(args.out if result.schedule is not None else None)
    out["instance"] = instance.name
    if interrupted:
        out["interrupted"] = True
    if args.json:
        print_json(out)
    else:
        metrics = out.get("metrics") or {}
        named = {"objective": f"objective ({out['objective_name']})"} if out.get("objective_name") else {}
        named["wall_time"] = "wall_time (s)"
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
                + [("schedule source", out[k]) for k in ("incumbent",) if k in out]
                + metric_pairs({k: metrics[k] for k in SUMMARY_METRICS if k in metrics})
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
