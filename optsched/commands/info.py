"""``optsched info INSTANCE [--json]``.

What an instance contains (requests, lengths, arrivals, limits, cost model), the requests that can
never finish (prompt + output - 1 > kv_capacity; listed all, not only the first), the requests that
can never meet one of their SLOs, and the trivial bounds of :mod:`optsched.bounds`.
Exit 1 when some request can never finish, 0 otherwise.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

from ..bounds import instance_bounds, request_bounds
from ..instance import Instance
from ..schedule import TIME_RTOL
from ._common import (
    EXIT_NO,
    EXIT_OK,
    add_instance_arguments,
    add_json_flag,
    check_output_path,
    format_mapping,
    format_table,
    load_instance_arg,
    print_json,
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("info", help="describe an instance: contents, infeasible requests, trivial bounds")
    add_instance_arguments(p)
    p.add_argument(
        "--out",
        metavar="FILE",
        help="write the instance (options and transforms applied) as JSON, e.g. a trace's slice "
        "for export --instance; not written when a request can never finish",
    )
    add_json_flag(p)
    p.set_defaults(func=handle)


def _stats(values: np.ndarray) -> dict[str, float]:
    return {
        "min": float(values.min()),
        "mean": float(values.mean()),
        "max": float(values.max()),
        "sum": float(values.sum()),
    }


def describe(instance: Instance) -> dict[str, Any]:
    """The JSON object ``optsched info --json`` prints."""
    reqs = instance.requests
    lim = instance.limits
    prompt = np.array([r.prompt_tokens for r in reqs])
    output = np.array([r.output_tokens for r in reqs])
    arrival = np.array([r.arrival for r in reqs])
    cannot_fit = [
        {"id": r.id, "max_kv": r.max_kv, "kv_capacity": lim.kv_capacity}
        for r in reqs
        if lim.kv_capacity is not None and r.max_kv > lim.kv_capacity
    ]
    slo_unattainable = []
    for r in reqs:
        if r.slo is None or (lim.kv_capacity is not None and r.max_kv > lim.kv_capacity):
            continue
        lb = request_bounds(instance, r)
        for what, target, bound in (
            ("ttft", r.slo.ttft, lb.ttft),
            ("e2e", r.slo.e2e, lb.e2e),
            ("tpot", r.slo.tpot, lb.tpot),
            ("atgt", r.slo.atgt, lb.tpot),
        ):
            if target is not None and bound is not None and bound > target * (1 + TIME_RTOL):
                slo_unattainable.append({"id": r.id, "slo": what, "target": target, "lower_bound": bound})
    feasible_part = (
        instance
        if not cannot_fit
        else instance.with_requests([r for r in reqs if lim.kv_capacity is None or r.max_kv <= lim.kv_capacity])
    )
    bounds = [b.to_dict() for b in instance_bounds(feasible_part)] if feasible_part.requests else []
    return {
        "instance": instance.name,
        "requests": len(reqs),
        "cost_model": {
            "name": instance.cost_model.name,
            "source": instance.cost_model.source,
            **instance.cost_model.to_dict(),
        },
        "limits": lim.to_dict(),
        "prompt_tokens": _stats(prompt),
        "output_tokens": _stats(output),
        "arrival": {"first": float(arrival.min()), "last": float(arrival.max()), "offline": bool((arrival == 0).all())},
        "with_slo": sum(r.slo is not None for r in reqs),
        "with_predicted_output": sum(r.predicted_output_tokens is not None for r in reqs),
        "extra_keys": sorted(instance.extra),
        "infeasible_requests": cannot_fit,
        "slo_unattainable": slo_unattainable,
        "bounds": bounds,
    }


def handle(args: argparse.Namespace) -> int:
    check_output_path(args.out)
    instance = load_instance_arg(args, check_capacity=False)
    info = describe(instance)
    if args.out is not None:
        if info["infeasible_requests"]:
            print(f"optsched: note: {args.out} not written: some request can never finish", file=sys.stderr)
        else:
            instance.save(args.out)
    info["path"] = args.out if args.out is not None and not info["infeasible_requests"] else None
    if args.json:
        print_json(info)
    else:
        lim = info["limits"]
        p, o, a = info["prompt_tokens"], info["output_tokens"], info["arrival"]
        print(
            format_mapping([
                ("instance", info["instance"]),
                ("requests", info["requests"]),
                ("cost model", f"{info['cost_model']['name']} ({info['cost_model']['source'] or 'inline'})"),
                ("limits", ", ".join(f"{k}={v}" for k, v in lim.items())),
                (
                    "prompt tokens",
                    f"min {p['min']:.0f}, mean {p['mean']:.2f}, max {p['max']:.0f}, total {p['sum']:.0f}",
                ),
                (
                    "output tokens",
                    f"min {o['min']:.0f}, mean {o['mean']:.2f}, max {o['max']:.0f}, total {o['sum']:.0f}",
                ),
                ("arrivals", "all at 0 (offline)" if a["offline"] else f"{a['first']:.6g} .. {a['last']:.6g} s"),
                ("with SLO", info["with_slo"]),
                ("extra keys", ", ".join(info["extra_keys"]) or "-"),
            ])
        )
        if info["infeasible_requests"]:
            print(f"\n{len(info['infeasible_requests'])} request(s) can never finish (I + O - 1 > kv_capacity):")
            for r in info["infeasible_requests"]:
                print(f"  {r['id']}: needs {r['max_kv']} KV slots > {r['kv_capacity']}")
        if info["slo_unattainable"]:
            print(f"\n{len(info['slo_unattainable'])} SLO(s) no schedule can meet:")
            for s in info["slo_unattainable"]:
                print(f"  {s['id']}: {s['slo']} target {s['target']:.6g} s < lower bound {s['lower_bound']:.6g} s")
        if info["bounds"]:
            note = " (of the requests that can finish)" if info["infeasible_requests"] else ""
            print(f"\ntrivial bounds{note}:")
            print(
                format_table(
                    ("bound", "value", "proven", "note"),
                    [(b["name"], b["value"], "yes" if b["valid"] else "no", b["note"]) for b in info["bounds"]],
                )
            )
    return EXIT_NO if info["infeasible_requests"] else EXIT_OK
