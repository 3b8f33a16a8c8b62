"""Whole-process ``optsched simulate`` against Vidur 0.0.26 on the full splitwise_conv trace (run on demand).

Target (issue 37): optsched at least 30x faster than Vidur, both as whole processes, on the same
workload and settings: 19,366 requests, Llama-2-7B on one A100 (TP 1, one replica), vLLM
scheduling, KV 100,000 tokens (6,250 blocks of 16), 4,096 tokens per batch, at most 128 requests.

- A: ``optsched simulate TRACE --cost-model llama2-7b-a100 --token-budget 4096 --kv-capacity 100000
  --max-running 128 --policy vllm --quiet`` (its schedule is replayed inside the command).
- B: ``python -m vidur.main`` in the venv made by ``tests/benchmarks/vidur_env.sh``: trace-replay
  generator on the renamed trace (scale factors 1, ``max_tokens`` 4096, which clips the prompts of
  the 1,612 requests with I + O > 4096), random-forest predictor on the offline profile cache
  (grid reduced to 250 trees, depth 16; predictions up to 4,096 tokens, the model's context),
  metrics written as CSV without plots and without the Chrome trace.

The warm-up comes first: ``optsched warmup`` (it compiles optsched's kernels into numba's disk cache
and builds the engine's and the replay's kernels ahead of time, so that ``simulate`` imports no
numba), ``python -m compileall`` of the optsched package (the ``.pyc`` files an installation has; a
process started with ``PYTHONDONTWRITEBYTECODE`` otherwise compiles optsched's sources at every
start), and one run of each command (Vidur's trains its predictor when none is cached, and also
writes its per-batch table, the only place its batch count is written); then ``--rounds`` rounds
alternate A and B. Wall seconds and CPU seconds
(user + system of the process and its children) per run, their medians, and the ratios B / A.
The machine load (1-minute average) is printed before and after. Skips (exit 0) with the reason when
the shared data or the Vidur venv is absent.

Usage::

    tests/benchmarks/vidur_env.sh                         # once: venv, fix, offline inputs
    python tests/benchmarks/bench_vidur.py --rounds 3
    python tests/benchmarks/bench_vidur.py --vidur-venv DIR --rounds 5
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CANDIDATES = [REPO.parent / "shared" / "data", REPO.parent.parent / "shared" / "data"]
DATA = next((p for p in CANDIDATES if p.is_dir()), CANDIDATES[0])
TRACE = DATA / "traces" / "splitwise_conv.csv"
DEFAULT_VENV = Path.home() / ".cache" / "optsched" / "vidur-0.0.26-venv"
RF = "--random_forrest_execution_time_predictor_config_"
OPTSCHED_ARGS = [
    *("--cost-model", "llama2-7b-a100", "--token-budget", "4096", "--kv-capacity", "100000"),
    *("--max-running", "128", "--policy", "vllm", "--quiet"),
]


@dataclass
class Run:
    """One timed whole-process run."""

    wall: float
    cpu: float
    figures: dict[str, float] = field(default_factory=dict)


def vidur_args(inputs: Path, out_dir: Path, batch_table: bool) -> list[str]:
    """Vidur's command-line flags for the benchmark's settings (``batch_table``: write per-batch rows)."""
    args = [
        *("--replica_config_model_name", "meta-llama/Llama-2-7b-hf", "--replica_config_device", "a100"),
        *("--replica_config_network_device", "a100_pairwise_nvlink", "--replica_config_tensor_parallel_size", "1"),
        *("--replica_config_num_pipeline_stages", "1", "--cluster_config_num_replicas", "1"),
        *("--replica_scheduler_config_type", "vllm", "--vllm_scheduler_config_batch_size_cap", "128"),
        *("--vllm_scheduler_config_max_tokens_in_batch", "4096"),
        *("--cache_config_block_size", "16", "--cache_config_num_blocks", "6250"),
        *("--request_generator_config_type", "trace_replay"),
        *("--trace_request_generator_config_trace_file", str(inputs / "splitwise_conv.csv")),
        *("--trace_request_generator_config_date", "2023-08-21"),
        *("--trace_request_generator_config_prefill_scale_factor", "1"),
        *("--trace_request_generator_config_decode_scale_factor", "1"),
        *("--trace_request_generator_config_time_scale_factor", "1"),
        *("--trace_request_generator_config_max_tokens", "4096"),
        *("--execution_time_predictor_config_type", "random_forrest"),
        *(RF + "cache_dir", str(inputs / "cache")),
        *(RF + "model_profiling_dataset", "optsched-local/vidur-a100-llama-2-7b"),
        *(RF + "network_profiling_dataset", "optsched-local/vidur-a100-pairwise-nvlink"),
        *(RF + "prediction_max_tokens_per_request", "4096"),
        *(RF + "num_estimators", "250", RF + "max_depth", "16", RF + "min_samples_split", "2"),
        *("--no-metrics_config_store_plots", "--no-metrics_config_enable_chrome_trace"),
        *("--metrics_config_output_dir", str(out_dir)),
    ]
    if batch_table:
        args.append("--metrics_config_keep_individual_batch_metrics")
    return args


def timed(cmd: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> tuple[Run, str]:
    """Run ``cmd`` to completion; its wall and CPU seconds and its standard output and error."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-15:])
        raise SystemExit(f"failed (exit {proc.returncode}): {' '.join(cmd[:4])} ...\n{tail}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Run(wall, cpu), proc.stdout + proc.stderr


def optsched_figures(output: str) -> dict[str, float]:
    """Batches, evictions, mean latency (s) and makespan (s) from ``optsched simulate``'s table."""
    wanted = {"batches": "batches", "evictions": "preemptions", "mean_latency (s)": "mean latency s"}
    wanted["makespan (s)"] = "makespan s"
    figures: dict[str, float] = {}
    for line in output.splitlines():
        key, _, value = line.rpartition(" ")
        if key.strip() in wanted:
            figures[wanted[key.strip()]] = float(value)
    return figures


def vidur_figures(out_dir: Path, output: str) -> dict[str, float]:
    """Preemptions (restarts), mean latency (s), makespan (s) and, when written, batches of a Vidur run."""
    (run_dir,) = [p for p in out_dir.iterdir() if p.is_dir()]
    with (run_dir / "request_metrics.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    figures = {
        "preemptions": float(sum(int(float(r["request_num_restarts"])) for r in rows)),
        "mean latency s": statistics.fmean(float(r["request_e2e_time"]) for r in rows),
    }
    ended = re.search(r"Simulation ended at: ([0-9.]+)s", output)
    if ended:
        figures["makespan s"] = float(ended.group(1))
    batch_table = run_dir / "batch_metrics.csv"
    if batch_table.exists():
        with batch_table.open(newline="") as f:
            figures["batches"] = float(sum(1 for _ in f) - 1)
    return figures


def optsched_command() -> list[str]:
    """The ``optsched`` command (its script, else ``python -m optsched``)."""
    exe = shutil.which("optsched")
    return [exe] if exe else [sys.executable, "-m", "optsched"]


def prepare_optsched() -> None:
    """``optsched warmup`` (kernels cached and built ahead of time) and the package's ``.pyc`` files."""
    import optsched

    timed([*optsched_command(), "warmup"])
    timed([sys.executable, "-m", "compileall", "-q", str(Path(optsched.__file__).parent)])


def run_optsched() -> Run:
    """A: one whole-process ``optsched simulate`` of the full trace."""
    run, output = timed([*optsched_command(), "simulate", str(TRACE), *OPTSCHED_ARGS])
    run.figures = optsched_figures(output)
    return run


def run_vidur(venv: Path, batch_table: bool = False) -> Run:
    """B: one whole-process Vidur simulation of the full trace, offline, in a scratch folder."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1", "WANDB_MODE": "disabled"}
    env.pop("PYTHONPATH", None)
    with tempfile.TemporaryDirectory(prefix="bench-vidur-") as scratch:
        out_dir = Path(scratch) / "out"
        cmd = [str(venv / "bin" / "python"), "-m", "vidur.main"]
        run, output = timed([*cmd, *vidur_args(venv / "optsched-inputs", out_dir, batch_table)], env, Path(scratch))
        run.figures = vidur_figures(out_dir, output)
    return run


def skip_reason(venv: Path) -> str | None:
    """Why the benchmark cannot run here, or None."""
    if not TRACE.is_file():
        return f"trace {TRACE} not found (the shared data folder is absent)"
    if not (venv / ".optsched-vidur-ready").is_file() or not (venv / "optsched-inputs" / "cache").is_dir():
        return f"no Vidur venv at {venv}: run tests/benchmarks/vidur_env.sh {venv}"
    return None


def describe(name: str, run: Run) -> str:
    """One line with a run's figures."""
    parts = [f"{k} {v:,.1f}" if k.endswith(" s") else f"{k} {v:,.0f}" for k, v in run.figures.items()]
    return f"{name}: " + ", ".join(parts)


def summarize(a_runs: list[Run], b_runs: list[Run]) -> None:
    """Print the medians and the ratios B / A."""
    a_wall, b_wall = statistics.median(r.wall for r in a_runs), statistics.median(r.wall for r in b_runs)
    a_cpu, b_cpu = statistics.median(r.cpu for r in a_runs), statistics.median(r.cpu for r in b_runs)
    print(f"median wall s: A {a_wall:.2f}, B {b_wall:.2f}; B / A = {b_wall / a_wall:.1f}x")
    print(f"median CPU s:  A {a_cpu:.2f}, B {b_cpu:.2f}; B / A = {b_cpu / a_cpu:.1f}x")
    target = "met" if b_wall / a_wall >= 30 and b_cpu / a_cpu >= 30 else "not met"
    print(f"target 30x (wall and CPU): {target}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds, each A then B (default 3)")
    parser.add_argument("--vidur-venv", type=Path, default=Path(os.environ.get("OPTSCHED_VIDUR_VENV", DEFAULT_VENV)))
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    reason = skip_reason(args.vidur_venv)
    if reason:
        print(f"skipped: {reason}")
        return
    print(f"trace {TRACE}; load {os.getloadavg()[0]:.2f}; cpus {os.cpu_count()}", flush=True)
    prepare_optsched()
    warm_a, warm_b = run_optsched(), run_vidur(args.vidur_venv, batch_table=True)
    print(f"warm-up: A {warm_a.wall:.2f} s wall / {warm_a.cpu:.2f} s CPU, B {warm_b.wall:.2f} s / {warm_b.cpu:.2f} s")
    print(describe("optsched (A)", warm_a))
    print(describe("Vidur (B, warm-up run with its per-batch table)", warm_b))
    print("| round | A wall s | A CPU s | B wall s | B CPU s | B/A wall | B/A CPU | load |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    a_runs: list[Run] = []
    b_runs: list[Run] = []
    for index in range(1, args.rounds + 1):
        a_runs.append(run_optsched())
        b_runs.append(run_vidur(args.vidur_venv))
        a, b = a_runs[-1], b_runs[-1]
        print(
            f"| {index} | {a.wall:.2f} | {a.cpu:.2f} | {b.wall:.2f} | {b.cpu:.2f} "
            f"| {b.wall / a.wall:.1f} | {b.cpu / a.cpu:.1f} | {os.getloadavg()[0]:.2f} |",
            flush=True,
        )
    summarize(a_runs, b_runs)
    print(describe("Vidur (B, last round)", b_runs[-1]))


if __name__ == "__main__":
    main()
