"""``optsched sweep-report DIR --html FILE [--json]``: tables and plots of a stored sweep.

Reads the Parquet dataset that ``optsched sweep`` wrote under DIR and writes one self-contained
HTML page (docs/sweep.md): throughput against P99 TTFT per policy with the Pareto front, capacity
per configuration, the gap to the proven bound per cell. ``--json`` prints the summary.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ._common import EXIT_OK, BadInput, add_json_flag, check_output_path, format_mapping, print_json
from .sweep import capacity_lines


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep-report", help="HTML page and summary of a stored sweep")
    p.add_argument("dir", metavar="DIR", help="folder written by optsched sweep --out")
    p.add_argument("--html", metavar="FILE", help="write the self-contained HTML page here")
    add_json_flag(p)
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from ..sweep.report import load_rows, summary, write_sweep_html
    from ..sweep.store import MissingDependency, StoreError, SweepStore

    check_output_path(args.html)
    if not Path(args.dir).is_dir():
        raise BadInput(f"{args.dir}: no such folder")
    try:
        rows = load_rows(args.dir)
        meta = SweepStore(args.dir).read_meta() or {}
    except (MissingDependency, StoreError) as exc:
        raise BadInput(str(exc)) from None
    if not rows:
        raise BadInput(f"{args.dir}: holds no sweep rows (part-*.parquet)")
    title = str(meta.get("spec", {}).get("name") or rows[0]["sweep"])
    if args.html is not None:
        write_sweep_html(rows, title, args.html)
    info = {"sweep": title, "dir": str(args.dir), "html": args.html, **summary(rows)}
    if args.json:
        print_json(info)
    else:
        print(format_mapping([(k, v) for k, v in info.items() if not isinstance(v, (list, dict))]))
        for k, n in info["by_kind_status"].items():
            print(f"  {k}: {n}")
        for line in capacity_lines(info["capacity"], {}):
            print(line)
    return EXIT_OK
