"""Benchmark: ``--time-limit`` bounds the whole command (goal: wall time <= limit + 1 s).

Run on demand (not collected by pytest), on an idle machine:

    python -m tests.benchmarks.bench_time_limits [--limit 5] [--repeat 3] [--cases infermax,report]
        [--cache warm|installed|cold]

``--cache`` says where the numba kernels come from: ``warm`` (default) the cache as it is, each
case run once untimed first; ``installed`` a new empty cache (``NUMBA_CACHE_DIR``) filled by
``optsched warmup`` (timed and reported), as right after the README's install command; ``cold``
a new empty cache for every timed run, nothing compiled ahead (the kernels compile inside the
limit: this shows what ``optsched warmup`` is for, and is not judged).

Every case runs the real command line in a fresh process (``python -m optsched ...``, start-up
included) and records the wall time from the process start to its exit, the status it reports and
``wall - limit``. The cases cover every problem of ``optsched.problems.SOLVERS`` on a shipped
instance each accepts (with the method that works longest); gmax and scls-batch need the
static-batching fields no large shipped instance has, so they run on ``gsm8k-like``'s first 40
requests with those fields added (written to a temporary folder); ``infermax-toy`` is ``toy-4``'s
mean latency, the smallest solve, where the solver's start-up is most of the time; then ``bound``
(``bound-latency``: InferMax's latency bounds on ``splitwise-conv-100``; ``bound-relax``:
``--method relax``; status ``stopped`` when only the bounds that need no solver were in time)
and ``report`` (``report-hybrid``: 30 requests on which the ``hybrid`` policies' CP-SAT assignment
runs 10 s, stopped at the deadline; ``report-html``: the README's main job with its HTML page, each
figure drawn only while time is left); the ``*-full-trace`` cases run ``solve`` (mean latency, and
goodput under SLOs of 0.2 s TTFT and 20 ms TPOT), ``bound`` and ``report`` on the 19,366 requests
of ``../shared/data/traces/splitwise_conv.csv`` (skipped where it is absent); ``start-up`` is
``optsched --help``.
Prints one row per case with the machine's 1-minute load average (``os.getloadavg``) before it, and
exits 1 when a case overran ``limit + slack`` (``warm`` and ``installed``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def static_instance(folder: Path, n: int = 40) -> Path:
    """``gsm8k-like``'s first ``n`` requests with the static-batching fields (docs/gmax.md,
    docs/scls.md): a latency profile, a batch-size cap, an e2e SLO each, an SCLS memory rule."""
    data = json.loads((REPO / "instances" / "gsm8k-like.json").read_text())
    data.update(
        name=f"gsm8k-like-static-{n}",
        max_batch_size=4,
        static_latency="qwen2.5-7b-2xv100",
        scls={"memory": {"kind": "fixed", "max_batch_size": 8}},
    )
    data["requests"] = [
        {**r, "task": "e2e", "slo": {"e2e": 5.0 + 0.25 * k}} for k, r in enumerate(data["requests"][:n])
    ]
    path = folder / f"{data['name']}.json"
    path.write_text(json.dumps(data))
    return path


#: Outputs of 30 requests whose decode rounds on 8 clients CP-SAT does not assign optimally
#: (P||Cmax) within seconds: the ``hybrid`` policies' offline assignment runs its 10 s there.
HARD_ASSIGNMENT_OUTPUTS = [249, 1, 241, 164, 251, 212, 49, 136, 46, 48, 129, 101, 50, 103, 250]
HARD_ASSIGNMENT_OUTPUTS += [264, 258, 186, 156, 46, 269, 138, 195, 108, 268, 9, 157, 200, 251, 204]


def hard_assignment_instance(folder: Path) -> Path:
    """30 requests arriving 0.3 s apart, 8 running at most, whose ``hybrid`` policy spends 10 s in
    CP-SAT: a report's time limit must stop it in C code."""
    requests = [
        {"id": f"r{k}", "arrival": 0.3 * k, "prompt_tokens": 200 + 50 * (k % 7), "output_tokens": out}
        for k, out in enumerate(HARD_ASSIGNMENT_OUTPUTS)
    ]
    limits = {"token_budget": 1024, "prefill_budget": 512, "kv_capacity": 20000, "max_running": 8}
    data = {"name": "hard-assignment-30", "cost_model": "llama2-7b-h200", "limits": limits, "requests": requests}
    path = folder / f"{data['name']}.json"
    path.write_text(json.dumps(data))
    return path


#: The full splitwise_conv trace (19,366 requests) of ``../shared/data``, beside the repository.
TRACE = REPO.parent / "shared" / "data" / "traces" / "splitwise_conv.csv"
FULL_TRACE = ["--cost-model", "llama2-7b-h200"]
TIGHT_SLOS = ["--slo-ttft", "0.2", "--slo-tpot", "0.02"]

#: (name, command line after ``optsched``); ``{L}`` is the time limit, ``{TRACE}`` :data:`TRACE`.
CASES: list[tuple[str, list[str]]] = [
    ("start-up", ["--help"]),
    ("infermax", ["solve", "infermax-i1024-o32-n64", "--problem", "infermax", "--time-limit", "{L}"]),
    ("infermax-toy", ["solve", "toy-4", "--problem", "infermax", "--objective", "latency", "--time-limit", "{L}"]),
    ("infermax-online", ["solve", "poisson-mixed-100", "--problem", "infermax", "--time-limit", "{L}"]),
    (
        "infermax-mip",
        ["solve", "infermax-lilo-silo-64", "--problem", "infermax", "--solver", "highs", "--time-limit", "{L}"],
    ),
    (
        "hybrid",
        ["solve", "infermax-i1024-o32-n64", "--problem", "hybrid", "--max-running", "8", "--time-limit", "{L}"],
    ),
    (
        "hybrid-offline",
        ["solve", "gsm8k-like", "--problem", "hybrid-offline", "--method", "mip", "--time-limit", "{L}"],
    ),
    ("aladdin", ["solve", "aladdin-fig3", "--problem", "aladdin", "--time-limit", "{L}"]),
    ("gmax", ["solve", "{STATIC40}", "--problem", "gmax", "--time-limit", "{L}"]),
    ("gmax-cpsat", ["solve", "{STATIC40}", "--problem", "gmax", "--solver", "cpsat", "--time-limit", "{L}"]),
    ("scls-batch", ["solve", "{STATIC40}", "--problem", "scls-batch", "--method", "mip", "--time-limit", "{L}"]),
    (
        "bound-latency",
        ["bound", "splitwise-conv-100", "--problem", "infermax", "--objective", "latency", "--time-limit", "{L}"],
    ),
    (
        "bound-relax",
        ["bound", "infermax-i64-o1024-n32-m10k", "--problem", "infermax", "--method", "relax", "--time-limit", "{L}"],
    ),
    ("report", ["report", "infermax-i1024-o32-n64", "--time-limit", "{L}", "--quiet"]),
    ("report-trace", ["report", "splitwise-conv-100", "--time-limit", "{L}", "--quiet"]),
    ("report-hybrid", ["report", "{HARD30}", "--objective", "latency", "--time-limit", "{L}", "--quiet"]),
    ("report-html", ["report", "splitwise-conv-100", "--time-limit", "{L}", "--quiet", "--html", "{PAGE}"]),
    (
        "solve-full-trace",
        ["solve", "{TRACE}", *FULL_TRACE, "--problem", "infermax", "--objective", "latency", "--time-limit", "{L}"],
    ),
    (
        "goodput-full-trace",
        [
            "solve",
            "{TRACE}",
            *FULL_TRACE,
            *TIGHT_SLOS,
            "--problem",
            "infermax",
            "--objective",
            "goodput",
            "--time-limit",
            "{L}",
        ],
    ),
    (
        "bound-full-trace",
        ["bound", "{TRACE}", *FULL_TRACE, "--problem", "infermax", "--objective", "latency", "--time-limit", "{L}"],
    ),
    (
        "report-full-trace",
        ["report", "{TRACE}", *FULL_TRACE, "--objective", "latency", "--time-limit", "{L}", "--quiet"],
    ),
]
#: The cases that read the full splitwise_conv trace of ../shared/data (skipped where it is absent).
TRACE_CASES = ("solve-full-trace", "goodput-full-trace", "bound-full-trace", "report-full-trace")


def run_case(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, int, str]:
    """Wall seconds from the process start to its exit, the exit code and the reported status."""
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "optsched", *argv, *(["--json"] if argv[0] not in ("--help", "warmup") else [])],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, **(env or {})},
    )
    wall = time.perf_counter() - start
    status = "-"
    if proc.stdout.strip().startswith("{"):
        out = json.loads(proc.stdout)
        status = str(
            out.get("status")
            or (out.get("solver") or {}).get("status")
            or ("partial" if out.get("partial") else "stopped" if out.get("stopped") else "ok")
        )
    elif proc.returncode not in (0, 1):
        status = proc.stderr.strip().splitlines()[-1][:80] if proc.stderr.strip() else f"exit {proc.returncode}"
    return wall, proc.returncode, status


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit", type=float, default=5.0, help="--time-limit of every case (seconds)")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per case; the largest wall is reported")
    ap.add_argument("--slack", type=float, default=1.0, help="allowed overrun (seconds)")
    ap.add_argument("--cases", help="comma-separated case names (default: all)")
    ap.add_argument("--cache", choices=("warm", "installed", "cold"), default="warm", help="see the module docstring")
    args = ap.parse_args()
    chosen = [c for c in CASES if args.cases is None or c[0] in args.cases.split(",")]
    if not TRACE.exists():
        print(f"skipped (no {TRACE}): {', '.join(c[0] for c in chosen if c[0] in TRACE_CASES)}")
        chosen = [c for c in chosen if c[0] not in TRACE_CASES]
    folder = Path(tempfile.mkdtemp(prefix="bench-time-limits-"))
    static, hard = str(static_instance(folder)), str(hard_assignment_instance(folder))
    print(f"load average before: {os.getloadavg()}; python {sys.version.split()[0]}; {os.cpu_count()} CPUs")
    env: dict[str, str] = {}
    if args.cache == "installed":
        env = {"NUMBA_CACHE_DIR": str(folder / "numba-cache")}
        wall, code, _ = run_case(["warmup"], env)
        print(f"optsched warmup into an empty cache: {wall:.1f} s, exit {code}, load {os.getloadavg()[0]:.1f}")
    print(f"{'case':<20} {'limit':>6} {'wall max':>9} {'over':>7} {'exit':>4} {'load':>5}  status")
    bad = 0
    for k, (name, template) in enumerate(chosen):
        fill = {"{L}": f"{args.limit:g}", "{STATIC40}": static, "{HARD30}": hard, "{PAGE}": str(folder / "r.html")}
        fill["{TRACE}"] = str(TRACE)
        argv = [fill.get(a, a) for a in template]
        if args.cache == "warm":
            run_case(argv)
        load = os.getloadavg()[0]
        walls, code, status = [], 0, "-"
        for r in range(args.repeat):
            if args.cache == "cold":
                env = {"NUMBA_CACHE_DIR": str(folder / f"numba-cold-{k}-{r}")}
            wall, code, status = run_case(argv, env)
            walls.append(wall)
        limited = "--time-limit" in argv  # start-up is reported, not judged
        limit = args.limit if limited else 0.0
        over = max(walls) - limit
        bad += args.cache != "cold" and ((limited and over > args.slack) or code not in (0, 1))
        print(
            f"{name:<20} {limit:6.1f} {max(walls):9.2f} {over:+7.2f} {code:4d} {load:5.1f}  {status}"
            f"  (walls {', '.join(f'{w:.2f}' for w in walls)})",
            flush=True,
        )
    print(f"load average after: {os.getloadavg()}")
    print(f"{bad} case(s) beyond limit + {args.slack:g} s" if bad else f"every case within limit + {args.slack:g} s")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
