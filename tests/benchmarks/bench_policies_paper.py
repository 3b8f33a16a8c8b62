"""InferMax section 4.3 (eviction-free vs original, O = B = 1024) in simulation (run on demand).

For I in {1, 64, 128, 1024}, O = B = 1024, M = 100,000, C = P = 4096 (``llama2-7b-a100``) this prints,
per base policy, its TPS, mean TTFT, mean TPOT and evictions and its eviction-free twin's ratios:
the paper reports ef TPS gains up to 6.9 % / 1.7 % / 3.1 % (vLLM / Sarathi / Sarathi_P=C), TTFT
increases up to 1800x (vLLM) and 91.7 % (Sarathi), TPOT reductions up to 13x and 6.5x.

Usage: ``python tests/benchmarks/bench_policies_paper.py [--prompts 1 64 128 1024] [--policies ...]``
"""

from __future__ import annotations

import argparse

from optsched import Instance, Limits, Request, load_cost_model, replay
from optsched.policies.engine import simulate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", nargs="+", type=int, default=[1, 64, 128, 1024])
    parser.add_argument("--policies", nargs="+", default=["vllm", "sarathi", "sarathi-pc"])
    parser.add_argument("--output", type=int, default=1024)
    parser.add_argument("--requests", type=int, default=1024)
    args = parser.parse_args()
    cost = load_cost_model("llama2-7b-a100")
    print(
        "| I | policy | TPS | mean TTFT s | mean TPOT ms | evictions "
        "| ef TPS gain | ef TTFT ratio | ef TPOT reduction |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for prompt in args.prompts:
        reqs = tuple(Request(f"r{k}", 0.0, prompt, args.output) for k in range(args.requests))
        inst = Instance(f"I{prompt}", cost, Limits(4096, 4096, 100_000, None), reqs)
        for policy in args.policies:
            base = replay(inst, simulate(inst, policy)).metrics
            ef = replay(inst, simulate(inst, policy + "-ef")).metrics
            print(
                f"| {prompt} | {policy} | {base.throughput:,.0f} | {base.mean_ttft:.2f} | {1000 * base.mean_tpot:.1f}"
                f" | {base.evictions} | {100 * (ef.throughput / base.throughput - 1):+.1f} %"
                f" | {ef.mean_ttft / base.mean_ttft:.2f}x | {base.mean_tpot / ef.mean_tpot:.2f}x |",
                flush=True,
            )


if __name__ == "__main__":
    main()
