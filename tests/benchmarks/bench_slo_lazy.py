"""Benchmark: the SLO policies' misses near the capacity, and where a policy's decodes wait.

Run on demand (not collected by pytest):

    python tests/benchmarks/bench_slo_lazy.py [--trace ../shared/data/traces/splitwise_conv.csv]
        [--first 3000 (0: all)] [--rate-scale 1.979932 2.078928] [--policy slo-budget slo-shed slo-lazy]
        [--windows 20]

Each policy runs on the trace's first ``--first`` requests (all without it) under the H200 profile
``llama2-7b-h200`` at each rate scale (the capacity grid's points: 1.05^14 = 1.98x, 1.05^15 = 2.08x),
every request with the targets TTFT 1 s and TPOT 0.1 s (as ``sweep --capacity --slo-ttft-p99 1
--slo-tpot-p99 0.1`` gives them). Every schedule is replayed; one line per policy and rate: the
requests over 1 s of TTFT and over 0.1 s of TPOT (beyond the replay's tolerance), how many a P99
target lets miss (floor(0.01 (N - 1))), and the P99s. A policy is a registered name, ``slo-lazy@H``
(``slo-lazy`` with ``lazy_horizon`` H) or ``NAME+shed`` (NAME with ``tpot_shed = 0.01``). With
``--windows S`` each policy also prints, per S seconds of batch starts, the mean batch time, the
requests between their first token and their finish, the share of them whose decode a batch
skipped, and the TTFT misses among the requests arriving then.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import replace

import numpy as np

from optsched.instance import Instance
from optsched.metrics import TIME_RTOL
from optsched.policies.config import POLICY_CONFIGS, PolicyConfig
from optsched.policies.engine import simulate
from optsched.replayresult import ReplayResult
from optsched.schedule import replay
from optsched.workload import WorkloadTransforms, apply_transforms, load_trace


def policy(name: str) -> PolicyConfig:
    """A registered policy, ``slo-lazy@H`` or ``NAME+shed`` (module docstring)."""
    if name.endswith("+shed"):
        return replace(policy(name[: -len("+shed")]), name=name, tpot_shed=0.01)
    if name.startswith("slo-lazy@"):
        return replace(POLICY_CONFIGS["slo-lazy"], name=name, lazy_horizon=float(name.split("@")[1]))
    return POLICY_CONFIGS[name]


def windows(inst: Instance, result: ReplayResult, ttft: np.ndarray, width: float) -> None:
    """Per ``width`` seconds of batch starts: batch time, decoding requests, skipped share, TTFT misses."""
    starts, ends = np.array(result.starts), np.array(result.ends)
    first = np.sort([o.first_token for o in result.outcomes.values()])
    finish = np.sort([o.finish for o in result.outcomes.values()])
    decoding = np.searchsorted(first, starts, side="right") - np.searchsorted(finish, starts, side="right")
    decodes = np.array(result.decode_items)
    arrival = np.array([r.arrival for r in inst.requests])
    for a in np.arange(0.0, ends[-1], width):
        m = (starts >= a) & (starts < a + width)
        if not m.any():
            continue
        skipped = (decoding[m] - decodes[m]).sum() / max(decoding[m].sum(), 1)
        late = int(((arrival >= a) & (arrival < a + width) & (ttft > 1 * (1 + TIME_RTOL))).sum())
        print(
            f"    {a:6.0f}-{a + width:6.0f} s: {m.sum():5d} batches of {1000 * (ends[m] - starts[m]).mean():5.1f} ms,"
            f" {decoding[m].mean():6.1f} decoding, {100 * skipped:4.1f} % skipped, TTFT misses of arrivals {late}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default="../shared/data/traces/splitwise_conv.csv")
    ap.add_argument("--first", type=int, default=3000)
    ap.add_argument("--rate-scale", type=float, nargs="+", default=[1.05**14, 1.05**15])
    ap.add_argument("--policy", nargs="+", default=["slo-budget", "slo-shed", "slo-lazy"])
    ap.add_argument("--windows", type=float, default=None)
    args = ap.parse_args()
    base = load_trace(args.trace, "llama2-7b-h200", max_rows=args.first or None, check_capacity=False)
    allowed = math.floor(0.01 * (len(base.requests) - 1))
    for rate in args.rate_scale:
        inst = apply_transforms(base, WorkloadTransforms(rate_scale=rate, slo_ttft=1.0, slo_tpot=0.1))
        for name in args.policy:
            result = replay(inst, simulate(inst, policy(name)))
            assert result.feasible, result.violations[:3]
            out = [(r, result.outcomes[r.id]) for r in inst.requests]
            ttft = np.array([o.first_token - r.arrival for r, o in out])
            tpot = np.array([(o.finish - o.first_token) / (r.output_tokens - 1) for r, o in out if r.output_tokens > 1])
            print(
                f"{len(inst.requests)} requests x{rate:.4f} {name}: TTFT > 1 s {int((ttft > 1 + TIME_RTOL).sum())},"
                f" TPOT > 0.1 s {int((tpot > 0.1 * (1 + TIME_RTOL)).sum())} ({allowed} may miss each);"
                f" P99 TTFT {np.quantile(ttft, 0.99):.3f} s, P99 TPOT {np.quantile(tpot, 0.99):.4f} s",
                flush=True,
            )
            if args.windows:
                windows(inst, result, ttft, args.windows)


if __name__ == "__main__":
    main()
