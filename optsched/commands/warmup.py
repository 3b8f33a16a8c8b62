"""``optsched warmup [--json]``: compile the solvers' kernels once, ahead of their first timed use.

Runs :func:`optsched.warmup.warm_up`: afterwards every kernel is in numba's disk cache and a
command's ``--time-limit`` holds from its first run. The README's install command runs it; run it
again after upgrading numba or optsched.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict

from ._common import EXIT_OK, add_json_flag, format_mapping, print_json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("warmup", help="compile the solvers' kernels once (after installing), so that time limits hold")
    add_json_flag(p)
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from ..warmup import warm_up

    quiet = args.json or not sys.stderr.isatty()
    report = warm_up(None if quiet else lambda case: print(f"warmup: {case}", file=sys.stderr))
    out = asdict(report)
    if args.json:
        print_json(out)
    else:
        print(format_mapping([(k, v) for k, v in out.items() if k != "cases"]))
    return EXIT_OK
