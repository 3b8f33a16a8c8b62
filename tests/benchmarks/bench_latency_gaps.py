"""Benchmark: gaps of ``optsched report --objective latency`` and ``--objective ttft`` under load.

Run on demand (not collected by pytest):

    python tests/benchmarks/bench_latency_gaps.py [--time-limit 30] [--only NAME ...] [--objectives latency ttft]

Runs the real command line in a subprocess on ``splitwise-conv-100`` at rate scales 1, 4, 8 and
16 and on three real-trace slices under load (``../shared/data/traces``; a slice whose trace is
absent is skipped): the first 300 requests of splitwise_code and of splitwise_conv at 4 times the
arrival rate, and 200 arxiv-summarisation length pairs with Poisson arrivals (2 requests/s, seed 0)
written to a temporary instance. Every slice runs under the llama2-7b-h200 profile and the limits
of ``splitwise-conv-100`` (C = P = 4096, M = 200,000, R_max = 256). Prints one row per slice and
objective: the best schedule, where it came from (with the solve's phase when it is the solver's), the
best proven bound, which bound, the gap (value - bound) / value, all in seconds, and whether the time
limit cut the report short (``partial``: some policies were not run). ``--only`` and ``--objectives``
run a subset (to resume a long run): a slice whose name equals one given runs alone, else those whose
name contains one.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
#: ``<repo>/../shared/data/traces`` or the same under any ancestor of the repo (worktrees).
TRACES = next(
    (base / "shared" / "data" / "traces" for base in REPO.parents if (base / "shared" / "data").is_dir()),
    REPO.parent / "shared" / "data" / "traces",
)
LIMITS = ["--cost-model", "llama2-7b-h200", "--token-budget", "4096", "--kv-capacity", "200000", "--max-running", "256"]
ARXIV = "arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv"


def arxiv_instance(folder: Path, n: int = 200, rate: float = 2.0, seed: int = 0) -> Path:
    """The first ``n`` arxiv (prompt, output) pairs with Poisson arrivals of ``rate`` per second."""
    with open(TRACES / ARXIV, newline="") as f:
        rows = [row for _, row in zip(range(n), csv.DictReader(f))]
    arrivals = np.cumsum(np.random.default_rng(seed).exponential(1.0 / rate, size=len(rows)))
    inst = {
        "name": f"arxiv-{n}-poisson{rate:g}",
        "cost_model": "llama2-7b-h200",
        "limits": {"token_budget": 4096, "prefill_budget": 4096, "kv_capacity": 200000, "max_running": 256},
        "requests": [
            {
                "id": f"r{k}",
                "prompt_tokens": int(row["num_prefill_tokens"]),
                "output_tokens": int(row["num_decode_tokens"]),
                "arrival": round(float(t), 6),
            }
            for k, (row, t) in enumerate(zip(rows, arrivals))
        ],
    }
    path = folder / f"{inst['name']}.json"
    path.write_text(json.dumps(inst))
    return path


def slices(folder: Path) -> list[tuple[str, list[str]]]:
    """(name, instance arguments of ``optsched report``) of every slice whose data is present."""
    out = [(f"splitwise-conv-100 x{r}", ["splitwise-conv-100", "--rate-scale", str(r)]) for r in (1, 4, 8, 16)]
    if (TRACES / "splitwise_code.csv").is_file():
        out.append(("splitwise_code first 300", [str(TRACES / "splitwise_code.csv"), "--first", "300", *LIMITS]))
    if (TRACES / "splitwise_conv.csv").is_file():
        conv = [str(TRACES / "splitwise_conv.csv"), "--first", "300", "--rate-scale", "4", *LIMITS]
        out.append(("splitwise_conv first 300 x4", conv))
    if (TRACES / ARXIV).is_file():
        out.append(("arxiv 200, Poisson 2/s", [str(arxiv_instance(folder))]))
    return out


def run(args: list[str], objective: str, time_limit: float) -> tuple[dict, float]:
    """One ``optsched report --json`` run: its JSON and wall time."""
    cmd = [sys.executable, "-m", "optsched", "report", *args, "--objective", objective]
    cmd += ["--time-limit", str(time_limit), "--json", "--quiet"]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, check=False)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {done.returncode}: {done.stderr[-500:]}")
    return json.loads(done.stdout), wall


PHASE, QUOTE = "phase '", "'"


def source_of(out: dict) -> str:
    """Where the report's best schedule came from: its source, with the solve's phase when the solver's
    (the solver row's message names it: "schedule of the solve's phase 'NAME'", or "policy search from
    seed ..." for ``online-search``)."""
    source = out["best"]["source"]
    solver = next((row for row in out["schedules"] if row["kind"] == "solver"), None)
    if not source.startswith("solver:") or solver is None:
        return source
    message = solver["message"]
    if PHASE in message:
        return f"{source} (`{message.split(PHASE)[1].split(QUOTE)[0]}`)"
    if message.startswith("policy search"):
        return f"{source} (`online-search`)"
    return source


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--time-limit", type=float, default=30.0, help="report --time-limit (default 30)")
    parser.add_argument("--only", nargs="*", help="run only these slices (a name, or words a name contains)")
    parser.add_argument("--objectives", nargs="*", choices=("latency", "ttft"), default=["latency", "ttft"])
    opts = parser.parse_args()
    print("| slice | objective | best (s) | from | best bound (s) | bound | gap | partial | wall (s) |")
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        chosen = slices(Path(tmp))
        names = {name for name, _ in chosen}
        words = [word for word in opts.only or () if word not in names]
        for name, args in chosen:
            if opts.only and not (name in opts.only or any(word in name for word in words)):
                continue
            for objective in opts.objectives:
                out, wall = run(args, objective, opts.time_limit)
                best = out["best"] or {"objective": float("nan"), "source": "none (partial)", "gap": None}
                source = source_of(out) if out["best"] else best["source"]
                bound = out["best_bound"] or {"value": float("nan"), "name": "-"}
                gap = "-" if best["gap"] is None else f"{100 * best['gap']:.1f} %"
                partial = "yes" if out["partial"] else "no"
                print(
                    f"| {name} | {objective} | {best['objective']:.5g} | {source} | "
                    f"{bound['value']:.5g} | {bound['name']} | {gap} | {partial} | {wall:.0f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
