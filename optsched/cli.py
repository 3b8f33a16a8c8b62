"""The ``optsched`` command line (the contract's command line: docs/cli.md).

Each subcommand lives in its own module under :mod:`optsched.commands` and exposes
``register(subparsers) -> None``; the parser it adds sets ``func`` to a handler
``handler(args) -> int | CommandOutput``. This module only wires them together and turns failures
into the contract's exit codes:

- 0 success, 1 the answer is "no" (infeasible), 2 bad input (one line on stderr naming the file and
  field), 3 internal error.

With ``--json`` a command prints exactly one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import sys
from contextlib import contextmanager, nullcontext
from importlib import import_module
from typing import Any, Iterator, Sequence, TextIO

from .costmodel import CostModelError
from .instance import InstanceError
from .schedule import ScheduleError

#: Modules that each add one subcommand (``register(subparsers)``).
COMMAND_MODULES: list[str] = [
    "optsched.commands.simulate",
    "optsched.commands.check",
    "optsched.commands.info",
    "optsched.commands.solve",
    "optsched.commands.bound",
    "optsched.commands.fit",
    "optsched.commands.plan",
    "optsched.commands.export",
    "optsched.commands.execute",
    "optsched.commands.validate",
    "optsched.commands.generate",
    "optsched.commands.report",
]

EXIT_OK, EXIT_NO, EXIT_BAD_INPUT, EXIT_INTERNAL = 0, 1, 2, 3


class BadInput(ValueError):
    """Raised by handlers for bad command-line input (exit code 2)."""


def _jsonable(value: Any) -> Any:
    """Replace non-finite floats by None so that the output is strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


#: Where :func:`print_json` writes while :func:`_stdout_reserved_for_json` is active.
_json_stream: TextIO | None = None


def print_json(obj: Any) -> None:
    """Print one JSON object on stdout (the only thing ``--json`` prints there)."""
    stream = _json_stream or sys.stdout
    stream.write(json.dumps(_jsonable(obj), indent=1) + "\n")
    stream.flush()


def _fileno(stream: TextIO) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, OSError, io.UnsupportedOperation):
        return None


@contextmanager
def _stdout_reserved_for_json() -> Iterator[None]:
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


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser, with every registered subcommand."""
    parser = argparse.ArgumentParser(
        prog="optsched",
        description="Provably optimal and provably bounded schedules for LLM inference serving.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMAND_MODULES:
        import_module(module).register(sub)
    return parser


def _naming_the_file(exc: Exception, args: argparse.Namespace) -> str:
    """The error message, led by the INSTANCE argument when a formulation's check (which knows the
    instance by its name only) raised it about the instance file."""
    message, path = str(exc), getattr(args, "instance", None)
    if isinstance(exc, InstanceError) and isinstance(path, str) and not message.startswith(path):
        return f"{path}: {message}"
    return message


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``optsched`` console script; returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: usage errors are bad input
        return EXIT_BAD_INPUT if exc.code not in (0, None) else EXIT_OK
    guard = _stdout_reserved_for_json() if getattr(args, "json", False) else nullcontext()
    try:
        with guard:
            code = args.func(args)
    except (InstanceError, ScheduleError, CostModelError, BadInput) as exc:
        print(f"optsched: error: {_naming_the_file(exc, args)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("optsched: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader closed stdout (e.g. `| head`): not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except Exception as exc:  # noqa: BLE001 - the contract maps anything else to exit 3
        print(f"optsched: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_INTERNAL
    return int(code or 0)


if __name__ == "__main__":  # pragma: no cover
    # Run the package's module, not this ``__main__`` copy: handlers import ``optsched.cli`` and
    # print_json must see the state that main() sets up there.
    from optsched.cli import main as package_main

    sys.exit(package_main())
