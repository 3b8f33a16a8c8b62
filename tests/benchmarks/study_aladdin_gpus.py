"""GPU-savings study (issue 5): minimum GPUs for P100 SLO attainment per placement method.

Workload: the Splitwise conversation trace (``<repo>/../shared/data/traces/splitwise_conv.csv``),
requests with ``prompt <= 2048`` and ``prompt + output <= 4096`` (docs/aladdin.md, A20), a slice of
``--requests`` consecutive rows starting at ``--offset``; arrival times are scaled so that the slice's
mean rate is each of ``--rates`` requests/s. Llama-2-7b on A100 with the Table 2 SLOs (TTFT 0.4 s,
ATGT 15 ms); worker coefficients from :mod:`tests.support.aladdin_workers`, measured
variant (Vidur's A100 layer profiles under ``<repo>/../shared/data/vidur_profiling``) unless
``--coefficients datasheet``; (d)'s decode slack ``--slack paper|atgt`` (docs/aladdin.md 8.3).
Output lengths are predicted by 10 prompt-length bins fitted on the trace rows outside the slice.

Methods: Aladdin's exact placement and best fit (Alg. 1) on a fixed W (W searched) and with their
own scaling (workers opened as needed, theta searched), JSQ, power of two and round robin on 1-GPU
workers (N_g^opt); JSQ on 2-GPU workers; "default vLLM" = JSQ on 4-GPU workers. Run:

    python -m tests.benchmarks.study_aladdin_gpus [--rates 2 4 8 16] [--requests 300] [--slack atgt]
        [--coefficients measured|datasheet] [--methods exact bestfit ...] [--out PATH_STEM]

Writes ``<out>.svg`` and ``<out>.json`` (default ``docs/img/aladdin_gpus``) and prints a Markdown
table; the JSON records the process CPU seconds and the load average.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DATA = next(
    (p for p in (REPO.parent / "shared" / "data", REPO.parent.parent / "shared" / "data") if p.is_dir()),
    REPO.parent / "shared" / "data",
)

from optsched.costmodel import load_cost_model  # noqa: E402
from optsched.instance import Instance, InstanceError, Limits, Request  # noqa: E402
from optsched.problems.aladdin.capacity import heartbeat_lower_bound, min_workers, min_workers_scaling  # noqa: E402
from optsched.problems.aladdin.predictor import BinPredictor  # noqa: E402
from tests.support.aladdin_workers import measured_layers, worker_coefficients  # noqa: E402

METHODS = [("exact", 1), ("bestfit", 1), ("jsq", 1), ("po2", 1), ("rr", 1), ("jsq", 2), ("jsq", 4)]
SCALING = ["exact", "bestfit"]
LABELS = {
    "exact": "Aladdin exact, fixed W (missing: never P100)",
    "bestfit": "Aladdin best fit, fixed W (missing: never P100)",
    "exact-scaling": "Aladdin exact, opens workers (theta searched)",
    "bestfit-scaling": "Aladdin best fit, opens workers (theta searched)",
    "jsq": "JSQ, 1 GPU/worker (N_g^opt)",
    "po2": "power of two, 1 GPU/worker",
    "rr": "round robin, 1 GPU/worker",
    "jsq-2gpu": "JSQ, 2 GPUs/worker",
    "jsq-4gpu": "JSQ, 4 GPUs/worker (default vLLM)",
}
#: Prediction-error margin of (b) and (d) (docs/aladdin.md, A8: 0.9; the paper gives no value).
THETA = 0.9


def read_trace(path: Path) -> list[tuple[float, int, int]]:
    with open(path, newline="") as fh:
        rows = [
            (float(r["arrived_at"]), int(r["num_prefill_tokens"]), int(r["num_decode_tokens"]))
            for r in csv.DictReader(fh)
        ]
    return [r for r in rows if r[1] <= 2048 and r[1] + r[2] <= 4096]


def build(rows, rate: float, gpus: int, name: str, layers=None, slack: str = "paper") -> Instance:
    w = worker_coefficients("llama2-7b", "a100", gpus, layers)
    t0 = rows[0][0]
    span = rows[-1][0] - t0
    scale = (len(rows) - 1) / span / rate if span > 0 else 1.0
    reqs = tuple(Request(f"r{k}", (a - t0) * scale, p, o) for k, (a, p, o) in enumerate(rows))
    limits = Limits(token_budget=4096, prefill_budget=4096, kv_capacity=w.kv_tokens)
    extra = {
        "slo": {"ttft": w.ttft, "atgt": w.atgt},
        "placement": {"kv_capacity": w.kv_tokens, "theta": THETA, "slack": slack},
    }
    return Instance(name, load_cost_model(w.cost_model()), limits, reqs, extra)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rates", type=float, nargs="+", default=[2.0, 4.0, 8.0, 16.0])
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--offset", type=int, default=0)
    ap.add_argument("--heartbeat", type=float, default=0.1)
    ap.add_argument("--time-limit", type=float, default=1.0)
    ap.add_argument("--out", default=str(REPO / "docs" / "img" / "aladdin_gpus"))
    ap.add_argument("--coefficients", choices=["measured", "datasheet"], default="measured")
    ap.add_argument("--slack", choices=["paper", "atgt"], default="atgt")
    ap.add_argument(
        "--methods",
        nargs="+",
        default=None,
        help="keys to run (e.g. exact bestfit jsq-2gpu exact-scaling); default: all",
    )
    args = ap.parse_args()
    cpu0 = time.process_time()
    path = DATA / "traces" / "splitwise_conv.csv"
    if not path.exists():
        print(f"skip: {path} not available", file=sys.stderr)
        return 0
    layers = None
    if args.coefficients == "measured":
        if not (DATA / "vidur_profiling").is_dir():
            print(f"skip: {DATA / 'vidur_profiling'} not available", file=sys.stderr)
            return 0
        layers = measured_layers(str(DATA))
    rows = read_trace(path)
    sl = rows[args.offset : args.offset + args.requests]
    history = rows[: args.offset] + rows[args.offset + args.requests :]
    pred = BinPredictor.fit([p for _, p, _ in history], [o for _, _, o in history], bins=10)
    margin = args.heartbeat + worker_coefficients("llama2-7b", "a100", 1, layers).atgt
    wanted = lambda key: args.methods is None or key in args.methods  # noqa: E731
    results = []
    for rate in args.rates:
        inst1 = build(sl, rate, 1, f"conv-{rate:g}rps", layers, args.slack)
        lb = heartbeat_lower_bound(inst1, heartbeat=args.heartbeat, predictor=pred, time_limit=5)
        row = {"rate": rate, "lower_bound_workers": lb, "methods": {}}
        for method, gpus in METHODS:
            key = method if gpus == 1 else f"{method}-{gpus}gpu"
            if not wanted(key):
                continue
            inst = inst1 if gpus == 1 else build(sl, rate, gpus, f"conv-{rate:g}rps-{gpus}gpu", layers, args.slack)
            t = time.perf_counter()
            try:
                res = min_workers(
                    inst,
                    method,
                    1.0,
                    gpus_per_worker=gpus,
                    hi=128,
                    heartbeat=args.heartbeat,
                    predictor=pred,
                    time_limit=args.time_limit,
                    ttft_margin=margin,
                )
            except InstanceError as exc:  # the worker cannot meet the SLO even unbatched
                row["methods"][key] = {"workers": None, "gpus": None, "reason": str(exc)}
                print(f"rate {rate:g}: {key}: {exc}", file=sys.stderr, flush=True)
                continue
            row["methods"][key] = {**res.to_dict(), "seconds": time.perf_counter() - t}
            print(
                f"rate {rate:g}: {key}: workers {res.workers} gpus {res.gpus} evaluated {res.evaluated}"
                f" ({time.perf_counter() - t:.1f} s)",
                file=sys.stderr,
                flush=True,
            )
        for method in SCALING:
            if not wanted(f"{method}-scaling"):
                continue
            t = time.perf_counter()
            res = min_workers_scaling(
                inst1,
                method,
                1.0,
                heartbeat=args.heartbeat,
                predictor=pred,
                time_limit=args.time_limit,
                ttft_margin=margin,
            )
            row["methods"][f"{method}-scaling"] = {**res.to_dict(), "seconds": time.perf_counter() - t}
            print(
                f"rate {rate:g}: {method}-scaling: workers {res.workers} evaluated {res.evaluated}"
                f" ({time.perf_counter() - t:.1f} s)",
                file=sys.stderr,
                flush=True,
            )
        results.append(row)
        Path(args.out + ".json").write_text(json.dumps({"results": results}, indent=1) + "\n")
    meta = {
        "trace": "splitwise_conv.csv",
        "filter": "prompt <= 2048 and prompt + output <= 4096",
        "requests": len(sl),
        "offset": args.offset,
        "heartbeat": args.heartbeat,
        "ttft_margin": margin,
        "model": "llama2-7b",
        "gpu": "a100",
        "slo": {"ttft": 0.4, "atgt": 0.015},
        "theta": THETA,
        "coefficients": args.coefficients,
        "slack": args.slack,
        "worker_1gpu": worker_coefficients("llama2-7b", "a100", 1, layers).cost_model(),
        "cpu_seconds": time.process_time() - cpu0,
        "load_average": os.getloadavg(),
    }
    Path(args.out + ".json").write_text(json.dumps({"meta": meta, "results": results}, indent=1) + "\n")
    plot(results, args.out + ".svg", meta)
    table(results)
    return 0


def plot(results, out: str, meta: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    rates = [r["rate"] for r in results]
    keys = list(results[0]["methods"])
    for key in keys:
        ys = [r["methods"][key]["gpus"] for r in results]
        if all(y is None for y in ys):
            continue
        ax.plot(rates, [y if y is not None else float("nan") for y in ys], marker="o", label=LABELS.get(key, key))
    ax.plot(rates, [r["lower_bound_workers"] for r in results], "k:", label="placement-model lower bound")
    ax.set_xlabel("arrival rate (requests/s)")
    ax.set_ylabel("GPUs for P100 SLO attainment")
    ax.set_title(
        "Llama-2-7b / A100, Splitwise conversation trace, TTFT 0.4 s, ATGT 15 ms\n"
        f"{meta['coefficients']} coefficients, (d) slack '{meta['slack']}'",
        fontsize=9,
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out)


def table(results) -> None:
    keys = list(results[0]["methods"])
    print("| rate (req/s) | LB | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 2) + "|")
    for r in results:
        cells = [
            str(r["methods"][k]["gpus"])
            if r["methods"][k]["gpus"] is not None
            else ("unreachable" if "reason" in r["methods"][k] else "none <= 128 workers")
            for k in keys
        ]
        print(f"| {r['rate']:g} | {r['lower_bound_workers']} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    sys.exit(main())
