"""The ``optsched`` command line (the contract's command line: docs/cli.md).

Each subcommand lives in its own module under :mod:`optsched.commands` and exposes
``register(subparsers) -> None``; the parser it adds sets ``func`` to a handler
``handler(args) -> int | CommandOutput``. This module only wires them together (importing only the
module of the command named, :data:`COMMANDS`) and turns failures into the contract's exit codes:

- 0 success, 1 the answer is "no" (infeasible), 2 bad input (one line on stderr naming the file and
  field), 3 internal error.

With ``--json`` a command prints exactly one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from collections.abc import Sequence
from contextlib import nullcontext
from typing import Any, NoReturn

from .budget import TimeBudget, process_started
from .commands._common import (
    EXIT_BAD_INPUT,
    EXIT_INTERNAL,
    EXIT_OK,
    BadInput,
    check_outputs_are_not_inputs,
    stdout_reserved_for_json,
)
from .costmodel import CostModelError
from .exiting import end_at, exit_now
from .instance import InstanceError
from .interrupt import EXIT_INTERRUPTED, held_signals, sigint_seen
from .jsonio import OutputError
from .option_error import OptionError
from .schedule import ScheduleError

#: The subcommands, in the order ``optsched --help`` lists them: each name's module under
#: :mod:`optsched.commands`, which adds its parser with ``register(subparsers)``. A command line that
#: names its command imports that module only (the others' imports are start-up time it never uses).
COMMANDS: dict[str, str] = {
    "simulate": "simulate",
    "check": "check",
    "info": "info",
    "solve": "solve",
    "bound": "bound",
    "fit": "fit",
    "profile": "profile",
    "plan": "capacity",
    "export": "export",
    "execute": "execute",
    "validate": "validate",
    "generate": "generate",
    "report": "report",
    "sweep": "sweep",
    "sweep-report": "sweep_report",
    "warmup": "warmup",
}

#: The commands whose ``--time-limit`` bounds the whole process: the program ends them
#: (:func:`optsched.exiting.end_at`, exit 124) when they run :data:`LIMIT_GRACE` past it. (``plan``'s
#: limit is per placement; ``report`` shares its limit among its phases itself.)
WHOLE_COMMAND_LIMITS = ("solve", "bound", "info")

#: Seconds past a time limit at which the program ends a command that has not ended by itself: its
#: own checks end it within the limit; this bounds the process at the limit plus 1 s (the rest is
#: for the ending itself: the message, the flush and the release of its memory under load).
LIMIT_GRACE = 0.75


class _Parser(argparse.ArgumentParser):
    """argparse's parser whose usage errors are one line on stderr, like every bad input (exit 2,
    docs/cli.md), pointing to the command's ``--help`` instead of printing its usage."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix("optsched").strip()
        where = f"{command}: " if command else ""
        self.exit(EXIT_BAD_INPUT, f"optsched: error: {where}{message} (see {self.prog} --help)\n")

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]  # argparse's overloads
        """argparse's, with words left over named with the command they were given to (argparse's
        own message comes from the top-level parser and names none)."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            command = getattr(parsed, "command", None)
            prog = f"{self.prog} {command}" if command else self.prog
            where = f"{command}: " if command else ""
            message = f"{where}unrecognized arguments: {' '.join(extras)}"
            self.exit(EXIT_BAD_INPUT, f"optsched: error: {message} (see {prog} --help)\n")
        return parsed


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser (one-line usage errors) with subcommand ``command`` only, or with every
    subcommand (None: for ``--help``, no command or an unknown one)."""
    parser = _Parser(
        prog="optsched",
        description="Provably optimal and provably bounded schedules for LLM inference serving.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    with held_signals():  # as the command line's own import (optsched.launch)
        modules = [
            importlib.import_module(f".commands.{COMMANDS[name]}", __package__)
            for name in ([command] if command is not None else COMMANDS)
        ]
    for module in modules:
        module.register(sub)
    return parser


def _named_command(argv: Sequence[str] | None) -> str | None:
    """The subcommand that the command line names first, when it is one of :data:`COMMANDS`."""
    words = sys.argv[1:] if argv is None else argv
    return words[0] if words and words[0] in COMMANDS else None


def _naming_the_file(exc: Exception, args: argparse.Namespace) -> str:
    """The error message, led by the INSTANCE argument when a formulation's check (which knows the
    instance by its name only) raised it about the instance file."""
    message, path = str(exc), getattr(args, "instance", None)
    if isinstance(exc, InstanceError) and isinstance(path, str) and not message.startswith(path):
        return f"{path}: {message}"
    return message


def main(argv: Sequence[str] | None = None, *, quick_exit: bool = False) -> int:
    """Entry point of the ``optsched`` console script; returns the exit code.

    With ``quick_exit`` (the program itself, :func:`optsched.launch.main`), a command given a
    ``--time-limit`` ends the process as soon as its outputs are out
    (:func:`optsched.exiting.exit_now`): the limit bounds the whole process, and the interpreter's
    teardown would come after it; one of :data:`WHOLE_COMMAND_LIMITS` still running
    :data:`LIMIT_GRACE` past its limit is ended there (:func:`optsched.exiting.end_at`)."""
    parser = build_parser(_named_command(argv))
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: usage errors are bad input
        return EXIT_BAD_INPUT if exc.code not in (0, None) else EXIT_OK
    # A command's --time-limit counts from the start of the program (interpreter and imports
    # included), or from this call when main() is called in-process with explicit arguments.
    args.started = process_started() if argv is None else time.perf_counter()
    limit = getattr(args, "time_limit", None)
    ended = None
    if quick_exit and limit is not None and args.command in WHOLE_COMMAND_LIMITS:
        ended = end_at(
            TimeBudget.of(limit, start=args.started).reserve(-LIMIT_GRACE),
            f"optsched: error: {args.command}: stopped at its time limit of {limit:g} s, before it had an answer",
        )
    code = _run(args)
    if ended is not None:
        ended()
    if quick_exit and limit is not None:
        exit_now(code)
    return code


def _run(args: argparse.Namespace) -> int:
    """Run the parsed command; its exit code (failures mapped to the contract's codes)."""
    guard = stdout_reserved_for_json() if getattr(args, "json", False) else nullcontext()
    try:
        check_outputs_are_not_inputs(args)
        with guard:
            code = args.func(args)
    except (InstanceError, ScheduleError, CostModelError, OutputError, OptionError, BadInput) as exc:
        print(f"optsched: error: {_naming_the_file(exc, args)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("optsched: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # the reader closed stdout (e.g. `| head`): not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except Exception as exc:  # noqa: BLE001 - the contract maps anything else to exit 3
        if sigint_seen():  # Ctrl-C inside a C extension's import surfaces as its ImportError
            print("optsched: interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
        print(f"optsched: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_INTERNAL
    return int(code or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
