"""``optsched bound INSTANCE [--problem NAME] [options] [--json]``.

Without ``--problem``: the instance's generic bounds (:func:`optsched.load_bounds.default_bounds`:
those of :mod:`optsched.bounds` and the load-aware bounds of the mean latency and the mean TTFT,
docs/cli.md lists them), proven under the contract's model; they take no options (any solver option
is bad input). With ``--problem``: the bounds of that formulation (:data:`optsched.problems.BOUNDERS`),
with its bound options (:data:`optsched.problems.BOUND_OPTIONS`) read from the same flags as
``solve``'s; under a time limit, the formulation's quick bounds when its solver does not load in
time (:func:`.solve.first_bounds`).
"""

from __future__ import annotations

import argparse
import sys

from .. import api
from ._common import (
    EXIT_OK,
    BadInput,
    add_instance_arguments,
    add_json_flag,
    command_budget,
    format_table,
    load_instance_arg,
    print_json,
)
from .solve import (
    add_problem_options,
    check_solver_option,
    first_bounds,
    known_formulation,
    options_from_args,
    problem_options,
    resolve,
    started_up_by,
    time_limit_of,
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bound", help="proven bounds of an instance (trivial ones, or a formulation's)")
    add_instance_arguments(p)
    p.add_argument("--problem", metavar="NAME", help="formulation (see optsched.problems.BOUNDERS)")
    add_problem_options(p)
    add_json_flag(p)
    p.set_defaults(func=handle)


#: Why a ``bound`` with a time limit reports only the formulation's quick bounds.
NOT_LOADED = "the solver did not load within the time limit: only the bounds that need none are reported"


def handle(args: argparse.Namespace) -> int:
    stopped = None
    if args.problem is None:
        given = options_from_args(args)
        if given:
            raise BadInput(f"option {next(iter(given))!r}: the trivial bounds take no options (give --problem NAME)")
        instance = load_instance_arg(args)
        from ..load_bounds import default_bounds  # numba: loaded by the commands that use it

        bounds = default_bounds(instance)
    else:
        record = known_formulation(args.problem)
        check_solver_option(args.problem, args.solver)
        options = problem_options(record, "bound", args)
        instance = load_instance_arg(args)
        budget = command_budget(args, time_limit_of(options))  # the whole command's, from the program's start
        first = first_bounds(record, instance, options, budget)
        if first is None:
            resolve("bound", args.problem, args.solver)
        if first is None or started_up_by(record, args.solver, budget, "bound"):
            bounds = api.bound(instance, args.problem, options, budget=budget)
        else:
            bounds, stopped = first, NOT_LOADED
            print(f"optsched: note: {stopped}", file=sys.stderr)
    rows = [b.to_dict() for b in bounds]
    if args.json:
        out = {"instance": instance.name, "problem": args.problem, "bounds": rows}
        print_json(out | ({"stopped": stopped} if stopped else {}))
    else:
        print(f"instance {instance.name}, {'problem ' + args.problem if args.problem else 'trivial bounds'}")
        print(
            format_table(
                ("bound", "value", "proven", "note"),
                [(b["name"], b["value"], "yes" if b["valid"] else "no", b["note"]) for b in rows],
            )
        )
    return EXIT_OK
