"""On-demand robustness check of the CLI (not collected by pytest): random instances and schedules,
every command, and the contract's exit codes.

    python tests/fuzz_cli.py valid [--count 60] [--seed 1] [--max-requests 6] [--time-limit 2]
    python tests/fuzz_cli.py mutate [--count 200] [--seed 1]

- ``valid``: random *valid* instances (1..max-requests requests, arrivals or not, SLOs, tasks, every
  limit and shipped profile, the static-batching fields on half of them) through every formulation
  (``solve``, ``bound``), objective and policy (``simulate``).
- ``mutate``: the shipped ``toy-4`` instance and a policy schedule of it, one field replaced by a
  value of another type or range (or deleted), through ``check``, ``simulate``, ``solve`` and
  ``export``.

A run is bad when the exit code is not 0, 1 or 2 (3 is an internal error), when exit 2 comes without
an error message, or when a command overruns its time limit by more than ``--slack`` seconds. Each bad
run is printed with the command and the file, kept under ``--dir``. Every defect it finds gets a
unit test of its own.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from optsched.cli import main
from optsched.policies import POLICIES
from optsched.problems import SOLVERS

TOY = Path(__file__).resolve().parents[1] / "instances" / "toy-4.json"
PROFILES = ("llama2-7b-a100", "llama2-70b-a100", "llama-65b-ascend8")
ODD_VALUES = (None, -1, 0, 1.5, "x", [], {}, True, 1e300, 1e18, 2**63, 1e-300, -0.5, 10**12, 3)


def valid_instance(rng: random.Random, k: int, max_requests: int) -> dict[str, Any]:
    reqs = []
    for i in range(rng.randint(1, max_requests)):
        r: dict[str, Any] = {"id": f"r{i}", "prompt_tokens": rng.randint(1, 64), "output_tokens": rng.randint(1, 12)}
        if rng.random() < 0.5:
            r["arrival"] = round(rng.uniform(0, 0.2), 4)
        if rng.random() < 0.5:
            r["slo"] = {rng.choice(["ttft", "e2e", "tpot"]): rng.uniform(0.01, 1)}
        if rng.random() < 0.5:
            r["task"] = rng.choice(["chat", "e2e"])
        reqs.append(r)
    need = max(r["prompt_tokens"] + r["output_tokens"] - 1 for r in reqs)
    limits: dict[str, Any] = {"token_budget": rng.choice([8, 64, 4096]),
                              "kv_capacity": rng.choice([None, need, need + 20, 10000]),
                              "max_running": rng.choice([None, 1, 2, 4])}
    if rng.random() < 0.5:
        limits["prefill_budget"] = rng.choice([4, 32, 4096])
    data: dict[str, Any] = {"name": f"fuzz{k}", "cost_model": rng.choice(PROFILES), "limits": limits, "requests": reqs}
    if rng.random() < 0.5:
        data["max_batch_size"] = rng.randint(1, 4)
        data["static_latency"] = "qwen2.5-7b-2xv100"
    return data


def valid_commands(time_limit: float) -> list[list[str]]:
    limit = ["--time-limit", str(time_limit)]
    cmds = [["solve", "--problem", p, *limit] for p in sorted(SOLVERS)]
    cmds += [["solve", "--problem", "infermax", *limit, "--objective", o] for o in ("ttft", "completion")]
    cmds += [["solve", "--problem", "infermax", *limit, "--no-evict"], ["bound", "--problem", "infermax"],
             ["bound", "--problem", "hybrid"], ["info"]]
    return cmds + [["simulate", "--policy", p] for p in sorted(POLICIES)]


def leaves(obj: Any, path: tuple = ()) -> Iterator[tuple]:
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield from leaves(value, path + (key,))
    elif isinstance(obj, list):
        for index, value in enumerate(obj):
            yield from leaves(value, path + (index,))
    if path:
        yield path


def mutated(rng: random.Random, base: Any) -> tuple[Any, str]:
    """``base`` with one field replaced by an odd value, or deleted."""
    out = copy.deepcopy(base)
    path = rng.choice(list(leaves(base)))
    parent = out
    for key in path[:-1]:
        parent = parent[key]
    if rng.random() < 0.2:
        del parent[path[-1]]
        return out, f"del {path}"
    parent[path[-1]] = rng.choice(ODD_VALUES)
    return out, f"{path} = {parent[path[-1]]!r}"


def run(argv: list[str]) -> tuple[int, str, float]:
    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
    return code, err.getvalue(), time.perf_counter() - start


def judge(argv: list[str], what: str, limit: float | None, slack: float) -> bool:
    code, err, wall = run(argv)
    bad = code not in (0, 1, 2) or (code == 2 and "error" not in err) or (limit is not None and wall > limit + slack)
    if bad:
        print(f"BAD exit {code}, {wall:.1f} s: {what}: {' '.join(argv)}\n    {err.strip()[-300:]}", flush=True)
    return bad


def fuzz_valid(args: argparse.Namespace) -> int:
    rng, bad = random.Random(args.seed), 0
    for k in range(args.count):
        path = args.dir / f"valid{args.seed}-{k}.json"
        path.write_text(json.dumps(valid_instance(rng, k, args.max_requests)))
        for cmd in valid_commands(args.time_limit):
            limit = args.time_limit if "--time-limit" in cmd else None
            bad += judge([cmd[0], str(path), *cmd[1:], "--json"], "valid instance", limit, args.slack)
    return bad


def fuzz_mutate(args: argparse.Namespace) -> int:
    rng, bad = random.Random(args.seed), 0
    base_schedule = args.dir / "toy-4.vllm.json"
    run(["simulate", "toy-4", "--policy", "vllm", "--out", str(base_schedule)])
    instance = json.loads(TOY.read_text())
    schedule = json.loads(base_schedule.read_text())
    for k in range(args.count):
        inst, what_i = mutated(rng, instance)
        sched, what_s = mutated(rng, schedule)
        ipath, spath = args.dir / f"mut{args.seed}-{k}.json", args.dir / f"mut{args.seed}-{k}.schedule.json"
        ipath.write_text(json.dumps(inst))
        spath.write_text(json.dumps(sched))
        cmds = [(["check", "toy-4", str(spath), "--json"], what_s),
                (["export", str(spath), "--format", "vllm-replay", "--instance", "toy-4",
                  "--out", str(args.dir / "plan.json")], what_s),
                (["simulate", str(ipath), "--policy", rng.choice(sorted(POLICIES)), "--json"], what_i),
                (["solve", str(ipath), "--problem", rng.choice(sorted(SOLVERS)), "--time-limit", "1", "--json"], what_i)]
        for argv, what in cmds:
            bad += judge(argv, what, 1.0 if argv[0] == "solve" else None, args.slack)
    return bad


def main_fuzz() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["valid", "mutate"])
    ap.add_argument("--count", type=int, default=60)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-requests", type=int, default=6)
    ap.add_argument("--time-limit", type=float, default=2.0)
    ap.add_argument("--slack", type=float, default=10.0, help="seconds a solve may overrun its limit")
    ap.add_argument("--dir", type=Path, default=Path("fuzz-out"))
    args = ap.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    bad = (fuzz_valid if args.mode == "valid" else fuzz_mutate)(args)
    print(f"fuzz {args.mode}: {bad} bad run(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main_fuzz())
