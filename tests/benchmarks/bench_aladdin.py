"""Speed of Aladdin's placement decisions (issue 5): 25 requests/s, heartbeats of 1 s.

The Splitwise conversation trace (``<repo>/../shared/data/traces/splitwise_conv.csv``, prompt <= 2048,
prompt + output <= 4096) is rescaled to 25 requests/s; Llama-2-7b workers on one A100 each (Table 2
SLOs). The multi-worker simulator runs ``--seconds`` of it with best fit and with the exact placement
(CP-SAT, workers opened as needed) and records the wall time of every heartbeat's decision (all
requests of the heartbeat, against the workers' ongoing requests). Goals: best fit < 5 ms per
decision, exact < 200 ms median (the paper's heuristic: < 50 ms at ~25 requests/s, Fig. 13).

    python tests/benchmarks/bench_aladdin.py [--seconds 60] [--time-limit 1.0]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from study_aladdin_gpus import DATA, build, read_trace  # noqa: E402

from optsched.problems.aladdin.cluster import simulate_cluster  # noqa: E402
from optsched.problems.aladdin.predictor import BinPredictor  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--rate", type=float, default=25.0)
    ap.add_argument("--time-limit", type=float, default=1.0)
    args = ap.parse_args()
    path = DATA / "traces" / "splitwise_conv.csv"
    if not path.exists():
        print(f"skip: {path} not available", file=sys.stderr)
        return 0
    rows = read_trace(path)
    n = int(args.seconds * args.rate) + 1
    history = rows[n:]
    pred = BinPredictor.fit([p for _, p, _ in history], [o for _, _, o in history], bins=10)
    inst = build(rows[:n], args.rate, 1, f"conv-{args.rate:g}rps")
    print(f"{n} requests over {inst.requests[-1].arrival:.1f} s, heartbeat 1 s")
    print("| method | heartbeats | requests/heartbeat (mean) | workers | median ms | p90 ms | max ms | per request ms (mean) |")
    print("|---|---|---|---|---|---|---|---|")
    for method in ("bestfit", "bestfit+rebalance", "exact"):
        res = simulate_cluster(inst, method, None, heartbeat=1.0, predictor=pred, time_limit=args.time_limit)
        ms = sorted(1e3 * t for t in res.decision_times)
        per_hb = n / len(ms)
        p90 = ms[int(0.9 * (len(ms) - 1))]
        print(f"| {method} | {len(ms)} | {per_hb:.1f} | {res.workers} | {statistics.median(ms):.2f} | {p90:.2f} | "
              f"{ms[-1]:.2f} | {statistics.fmean(ms) / per_hb:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
