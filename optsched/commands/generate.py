"""``optsched generate --name NAME --n N (--prompt SPEC --output SPEC | --type PSPEC OSPEC ...) [--out FILE]``.

Draws a seeded synthetic instance (:func:`optsched.generators.generate`). Length specs: ``128``
(fixed), ``8,16`` (uniform choice), ``normal:MEAN,SD[,LOW[,HIGH]]`` (rounded, clipped normal);
arrivals: ``zero`` or ``poisson:RATE``. Without ``--out`` the instance JSON is printed on stdout.
"""

from __future__ import annotations

import argparse
import sys

from ..generators import generate, parse_arrivals, parse_length
from ..jsonio import dumps_instance
from ._common import (
    EXIT_OK,
    BadInput,
    add_json_flag,
    check_output_path,
    limit_int,
    nonempty_text,
    positive_int,
    print_json,
    running_int,
    seed_int,
)

#: Most requests ``--n`` may ask for (a million requests take about 1.2 GB while generated).
MAX_GENERATED = 10**7


def _request_count(text: str) -> int:
    value = positive_int(text)
    if value > MAX_GENERATED:
        raise argparse.ArgumentTypeError(f"at most {MAX_GENERATED:,} requests, got {value:,}")
    return value


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("generate", help="draw a seeded synthetic instance (fixed grids, clipped normals, Poisson)")
    p.add_argument("--name", type=nonempty_text, required=True, help="instance name")
    p.add_argument("--n", type=_request_count, required=True, help=f"number of requests (at most {MAX_GENERATED:,})")
    p.add_argument("--prompt", metavar="SPEC", help="prompt length spec (one request type)")
    p.add_argument("--output", metavar="SPEC", help="output length spec (one request type)")
    p.add_argument(
        "--type",
        nargs=2,
        action="append",
        default=[],
        metavar=("PROMPT", "OUTPUT"),
        help="a request type (repeatable; requests split in equal shares, shuffled)",
    )
    p.add_argument("--arrivals", default="zero", help="zero (default) or poisson:RATE (requests/s)")
    p.add_argument("--seed", type=seed_int, default=0, help="seed of the random generator, an integer >= 0 (default 0)")
    p.add_argument("--cost-model", default="llama2-7b-a100", metavar="PROFILE", help="default llama2-7b-a100")
    p.add_argument("--token-budget", type=limit_int, metavar="C")
    p.add_argument("--prefill-budget", type=limit_int, metavar="P")
    p.add_argument("--kv-capacity", type=limit_int, metavar="M")
    p.add_argument("--max-running", type=running_int, metavar="R")
    p.add_argument("--out", metavar="FILE", help="write the instance JSON here (default: stdout)")
    add_json_flag(p)
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    check_output_path(args.out)
    specs = [("--type", list(pair)) for pair in args.type]
    if args.prompt is not None or args.output is not None:
        if args.prompt is None or args.output is None:
            raise BadInput("--prompt and --output go together")
        if specs:
            raise BadInput("give --prompt SPEC --output SPEC, or --type PROMPT OUTPUT, not both")
        specs = [("--prompt/--output", [args.prompt, args.output])]
    if not specs:
        raise BadInput("give --prompt SPEC --output SPEC, or one or more --type PROMPT OUTPUT")
    types = []
    for flag, (prompt, output) in specs:
        try:
            types.append((parse_length(prompt), parse_length(output)))
        except ValueError as exc:
            raise BadInput(f"{flag}: {exc}") from None
    try:
        arrivals = parse_arrivals(args.arrivals)
    except ValueError as exc:
        raise BadInput(f"--arrivals: {exc}") from None
    limits = {
        k: getattr(args, k)
        for k in ("token_budget", "prefill_budget", "kv_capacity", "max_running")
        if getattr(args, k) is not None
    }
    inst = generate(
        args.n,
        types,
        name=args.name,
        cost_model=args.cost_model,
        limits=limits,
        arrivals=arrivals,
        seed=args.seed,
        source="optsched generate",
    )
    if args.out is None:  # the instance itself is the one JSON object (also under --json)
        if args.json:
            print_json(inst.to_dict())
        else:
            sys.stdout.write(dumps_instance(inst.to_dict()))
        return EXIT_OK
    inst.save(args.out)
    if args.json:
        print_json({
            "instance": inst.name,
            "requests": len(inst.requests),
            "path": args.out,
            "source": inst.extra["source"],
        })
    else:
        print(f"wrote {args.out}: {len(inst.requests)} requests ({inst.extra['source']})")
    return EXIT_OK
