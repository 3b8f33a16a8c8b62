"""The Hybrid paper's experiment (seed003 Sec. V) on seeded GSM8K-like instances.

Usage::

    python -m tests.benchmarks.bench_hybrid_paper table [--moments literal|matched] [--seed 0]
    python -m tests.benchmarks.bench_hybrid_paper cases [--count 100] [--moments literal] [--baseline NAME]

``table`` prints makespan, utilisation (U, U_decode), tokens/s, prefill stages and decode rounds of every
hybrid policy and the two lower bounds. ``cases`` runs the baseline and the hybrid method on seeds
0..count-1 and prints the mean gains and whether lower bound <= hybrid <= baseline held on every case.
Every schedule is replayed; results go to stdout as JSON lines plus a markdown summary.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from optsched.policies import simulator_for
from optsched.problems.hybrid.bounds import paper_bound, strict_bound
from optsched.problems.hybrid.online import client_metrics
from optsched.schedule import replay
from tests.support.hybrid_paper import paper_batch

POLICIES = ["hybrid-baseline", "hybrid-baseline-global", "hybrid-offline", "hybrid-online", "hybrid", "hybrid-b"]
PAPER = {
    "hybrid-baseline": (201.00, 80.2),
    "hybrid-offline": (197.08, 85.5),
    "hybrid-online": (193.33, 86.19),
    "hybrid": (190.58, 89.06),
}


def run(inst, name: str) -> dict:
    t0 = time.perf_counter()
    schedule = simulator_for(name)(inst)
    wall = time.perf_counter() - t0
    rep = replay(inst, schedule)
    if not rep.feasible:
        raise SystemExit(f"{name}: schedule does not replay cleanly: {rep.violations[:3]}")
    return {"policy": name, "sim_s": wall, **client_metrics(inst, schedule, rep)}


def table(seed: int, moments: str) -> None:
    inst = paper_batch(seed, moments=moments)
    out_mean = statistics.mean(r.output_tokens for r in inst.requests)
    in_mean = statistics.mean(r.prompt_tokens for r in inst.requests)
    print(f"instance {inst.name}: prompt mean {in_mean:.2f}, output mean {out_mean:.2f}")
    rows = [run(inst, name) for name in POLICIES]
    lb_paper, tp, td = paper_bound(inst)
    lb_strict, sp, sd = strict_bound(inst)
    for row in rows:
        print(json.dumps(row))
    print(
        "| method | makespan (s) | U (%) | U_decode (%) | tok/s | prefill stages | decode rounds | paper makespan / U |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        ref = PAPER.get(row["policy"])
        ref_s = f"{ref[0]:.2f} s / {ref[1]:.2f} %" if ref else "-"
        print(
            f"| {row['policy']} | {row['makespan']:.2f} | {100 * row['utilisation']:.2f} | "
            f"{100 * row['u_decode']:.2f} | "
            f"{row['tokens_per_s']:.1f} | {row['prefill_stages']} | {row['decode_rounds']} | {ref_s} |"
        )
    print(
        f"| lower bound, paper (31)-(32) | {lb_paper:.2f} (t^p* {tp:.2f} + t^d* {td:.2f}) "
        "| | | | | | 180 s (13 + 167) |"
    )
    print(f"| lower bound, strict (proven) | {lb_strict:.2f} ({sp:.2f} + {sd:.2f}) | | | | | | - |")


def cases(count: int, moments: str, baseline: str) -> None:
    gains_u, gains_upp, gains_tok, spans = [], [], [], []
    ordered = 0
    for seed in range(count):
        inst = paper_batch(seed, moments=moments)
        base, hyb = run(inst, baseline), run(inst, "hybrid")
        lb = strict_bound(inst)[0]
        ok = lb <= hyb["makespan"] <= base["makespan"]
        ordered += ok
        gains_upp.append(100 * (hyb["utilisation"] - base["utilisation"]))
        gains_u.append(100 * (hyb["utilisation"] / base["utilisation"] - 1))
        gains_tok.append(hyb["tokens_per_s"] - base["tokens_per_s"])
        spans.append(100 * (1 - hyb["makespan"] / base["makespan"]))
        print(json.dumps({"seed": seed, "lb": lb, "baseline": base, "hybrid": hyb, "ordered": ok}), flush=True)
    print(f"cases: {count} ({moments}, baseline {baseline}); lower bound <= hybrid <= baseline on {ordered}/{count}")
    print(
        f"mean utilisation gain: {statistics.mean(gains_upp):.2f} pp ({statistics.mean(gains_u):.2f} % relative), "
        f"min {min(gains_upp):.2f} pp"
    )
    print(f"mean tokens/s gain: {statistics.mean(gains_tok):.2f} tok/s (min {min(gains_tok):.2f})")
    print(f"mean makespan reduction: {statistics.mean(spans):.2f} % (min {min(spans):.2f} %)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["table", "cases"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--moments", default="literal", choices=["literal", "matched"])
    ap.add_argument("--baseline", default="hybrid-baseline", help="policy the hybrid method is compared with")
    args = ap.parse_args()
    if args.what == "table":
        table(args.seed, args.moments)
    else:
        cases(args.count, args.moments, args.baseline)


if __name__ == "__main__":
    main()
