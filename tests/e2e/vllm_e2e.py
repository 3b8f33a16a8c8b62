"""End-to-end: schedule -> export -> real vLLM engine (CPU build) -> validate, for each schedule source.

Run by tests/e2e/vllm_e2e.sh, which prepares the vLLM virtual environment. This script runs
``optsched`` twice over: the project's own Python (``--python``, solve/simulate/export/validate) and
the vLLM venv's Python (``--vllm-python``, execute). Cases, on the InferMax-style instances here:

- ``handmade``: tests/e2e/e2e-tiny.handmade.json (chunked prefill, preemption with recompute);
- ``handmade-arrival``: tests/e2e/e2e-evict.handmade.json (a later arrival; the running request is
  preempted in decode to admit it, and recomputes);
- ``optimal``: ``optsched solve --problem infermax`` (makespan) on e2e-optimal.json, when the
  ``solve`` command and the ``infermax`` problem are registered (else reported as skipped). Two
  requests of 16 + 8 tokens and one of 33 + 1 under C = 32, M = 34: the proven optimum (53.34 ms)
  evicts one request in decode and recomputes it, and chunks the 33-token prompt; with ``--no-evict``
  the optimum is 57.69 ms, so the eviction is what makes it optimal;
- ``simulated``: ``optsched simulate --policy sarathi`` on e2e-sim.json (five staggered requests,
  C = 32, M = 128: the policy chunks prefills and preempts under memory pressure), when the policy
  exists.

Each case asserts: the schedule replays (export refuses otherwise), vLLM did exactly what the plan
says in every step (zero mismatches), and every request produced exactly its output length. Over all
the cases that ran, at least one preemption with recompute and one chunked prefill must have been
executed.

A last case, ``vllm-scheduler``, runs vLLM's own scheduler with no plan
(tests/benchmarks/bench_vllm_scheduler.py on ``splitwise-conv-100`` at 4x its rate under M = 8,192
tokens, where vLLM preempts): its schedules must replay, ``vllm-v1`` must equal vLLM's schedule with
KV blocks of 16 tokens batch for batch and ``sarathi-pc`` the one with blocks of 1 token; the
figures of ``vllm`` and ``vllm-hy`` are printed beside them (docs/policies.md).
The last line is ``vllm-e2e: N passed, M failed``; the exit code is non-zero on a failure.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: vLLM's CPU attention kernel takes KV blocks of a multiple of 32 tokens.
BLOCK_SIZE = 32


def run(cmd: list[str], log: Path) -> subprocess.CompletedProcess:
    """Run a command, keep its output in ``log``."""
    proc = subprocess.run(cmd, capture_output=True, text=True)
    log.write_text(f"$ {' '.join(cmd)}\n--- rc {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}")
    return proc


def features(plan: dict) -> tuple[int, int]:
    """(preemptions, chunked prefills) in a plan.

    A chunked prefill is counted when a request's first step processes fewer tokens than its prompt
    (a conservative count: chunked recomputations after a preemption are not counted).
    """
    prompt = {r["id"]: r["prompt_tokens"] for r in plan["requests"]}
    seen: set[str] = set()
    preempts = chunked = 0
    for step in plan["steps"]:
        preempts += len(step["preempt"])
        for rid, n in step["tokens"].items():
            if rid not in seen and n < prompt[rid]:
                chunked += 1
            seen.add(rid)
    return preempts, chunked


def has_command(py: str, name: str) -> bool:
    """Whether ``optsched NAME`` is registered in the optsched that ``py`` imports."""
    return subprocess.run([py, "-m", "optsched", name, "--help"], capture_output=True).returncode == 0


def has_entry(py: str, module: str, table: str, name: str) -> bool:
    """Whether ``name`` is in the registry ``module.table`` of the optsched that ``py`` imports."""
    code = f"import sys; from {module} import {table}; sys.exit(0 if {name!r} in {table} else 1)"
    return subprocess.run([py, "-c", code], capture_output=True).returncode == 0


def slack_blocks(instance: Path) -> list[str]:
    """``--kv-blocks`` for a machine-made schedule: the instance's M in blocks plus one per request.

    A solver or simulator uses M to the last token; with whole 32-token blocks per request the same
    schedule may need up to one more block per request than floor(M / 32). The plan still forces
    every preemption, so the executed schedule is the same; only vLLM's pool is larger than M.
    """
    data = json.loads(instance.read_text())
    m = data["limits"]["kv_capacity"]
    return ["--kv-blocks", str(-(-m // BLOCK_SIZE) + len(data["requests"]))]


def case(
    name: str, py: str, vpy: str, out: Path, instance: Path, make: list[str] | None, schedule: Path | None, totals: dict
) -> bool:
    """One schedule source through export -> execute -> validate; True when it passed."""
    d = out / name
    d.mkdir(parents=True, exist_ok=True)
    opt = [py, "-m", "optsched.cli"]
    t0 = time.perf_counter()
    if make is not None:
        schedule = d / "schedule.json"
        proc = run(opt + make + ["--out", str(schedule), "--json"], d / "make.log")
        if proc.returncode != 0 or not schedule.exists():
            print(f"[{name}] FAILED: making the schedule: see {d / 'make.log'}")
            return False
        try:
            info = json.loads(proc.stdout)
            print(
                f"[{name}] schedule: {info.get('status', info.get('policy'))}, objective "
                f"{info.get('objective', info.get('metrics', {}).get('makespan'))}"
            )
        except json.JSONDecodeError:
            pass
    plan = d / "plan.json"
    proc = run(
        opt
        + [
            "export",
            str(schedule),
            "--instance",
            str(instance),
            "--format",
            "vllm-replay",
            "--block-size",
            str(BLOCK_SIZE),
            "--out",
            str(plan),
            "--json",
            *(slack_blocks(instance) if make is not None else []),
        ],
        d / "export.log",
    )
    if proc.returncode != 0:
        print(f"[{name}] FAILED: export refused the schedule: {proc.stderr.strip()}")
        return False
    plan_data = json.loads(plan.read_text())
    pre, chunks = features(plan_data)
    result = d / "result.json"
    proc = run(
        [
            vpy,
            "-m",
            "optsched.cli",
            "execute",
            str(plan),
            "--model",
            "tiny-llama",
            "--dtype",
            "float32",
            "--repeats",
            "5",
            "--warmup",
            "1",
            "--out",
            str(result),
            "--json",
        ],
        d / "execute.log",
    )
    if not result.exists():
        print(f"[{name}] FAILED: execute wrote no result (rc {proc.returncode}); see {d / 'execute.log'}")
        return False
    res = json.loads(result.read_text())
    expected = {r["id"]: r["output_tokens"] for r in plan_data["requests"]}
    problems = list(res["mismatches"]) + list(res["length_errors"])
    if res["outputs"] != expected:
        problems.append(f"outputs {res['outputs']} != expected {expected}")
    if proc.returncode != 0 and not problems:
        problems.append(f"execute exited {proc.returncode}")
    if problems:
        print(f"[{name}] FAILED: " + "; ".join(problems))
        return False
    proc = run(
        opt
        + [
            "validate",
            str(result),
            "--plot",
            str(d / "validate.png"),
            "--profile-out",
            str(d / "refit.toml"),
            "--json",
        ],
        d / "validate.log",
    )
    rep = json.loads(proc.stdout) if proc.returncode == 0 else {}
    totals["preemptions"] += pre
    totals["chunked"] += chunks
    print(
        f"[{name}] passed: {len(res['steps'])} steps, 0 mismatches, outputs {res['outputs']}, "
        f"{pre} preemption(s), {chunks} chunked prefill(s); predicted {res['predicted_total'] * 1e3:.2f} ms, "
        f"measured {res['measured_total'] * 1e3:.2f} ms (CPU smoke test), MAPE {rep.get('mape', float('nan')):.1f} %, "
        f"refit MAPE {rep.get('refit_mape', float('nan')):.1f} % ({time.perf_counter() - t0:.0f} s)"
    )
    return True


def scheduler_fidelity(py: str, vpy: str, out: Path) -> bool:
    """vLLM's own scheduler against optsched's policies (module docstring); True when it passed."""
    d = out / "vllm-scheduler"
    d.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    bench = HERE.parent / "benchmarks" / "bench_vllm_scheduler.py"
    args = ["--instance", "splitwise-conv-100", "--rate-scale", "4", "--kv-capacity", "8192", "--check"]
    proc = run([py, str(bench), "--vllm-python", vpy, *args], d / "compare.log")
    print(f"[vllm-scheduler] {'passed' if proc.returncode == 0 else 'FAILED'} ({time.perf_counter() - t0:.0f} s):")
    print("\n".join("    " + line for line in (proc.stdout + proc.stderr).strip().splitlines()[-12:]))
    return proc.returncode == 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--python", default=sys.executable, help="Python with optsched and its dependencies")
    ap.add_argument("--vllm-python", required=True, help="Python of the vLLM venv (optsched installed there)")
    ap.add_argument("--out", required=True, help="working folder for schedules, plans and results")
    ap.add_argument(
        "--solve-time-limit",
        default="600",
        help="seconds for the InferMax solve (about 75 s on a loaded 2-core machine)",
    )
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    py, vpy = args.python, args.vllm_python
    evict_instance = HERE / "e2e-evict.json"
    cases: list[tuple[str, Path, list[str] | None, Path | None]] = [
        ("handmade", HERE / "e2e-tiny.json", None, HERE / "e2e-tiny.handmade.json"),
        ("handmade-arrival", evict_instance, None, HERE / "e2e-evict.handmade.json"),
    ]
    if has_command(py, "solve") and has_entry(py, "optsched.problems", "SOLVERS", "infermax"):
        opt_instance = HERE / "e2e-optimal.json"
        cases.append((
            "optimal",
            opt_instance,
            [
                "solve",
                str(opt_instance),
                "--problem",
                "infermax",
                "--objective",
                "makespan",
                "--time-limit",
                args.solve_time_limit,
            ],
            None,
        ))
    else:
        print("[optimal] skipped: 'optsched solve --problem infermax' is not available in this checkout")
    if has_command(py, "simulate") and has_entry(py, "optsched.policies", "POLICIES", "sarathi"):
        sim_instance = HERE / "e2e-sim.json"
        cases.append(("simulated", sim_instance, ["simulate", str(sim_instance), "--policy", "sarathi"], None))
    else:
        print("[simulated] skipped: 'optsched simulate --policy sarathi' is not available in this checkout")
    totals = {"preemptions": 0, "chunked": 0}
    passed = failed = 0
    for name, instance, make, schedule in cases:
        if case(name, py, vpy, out, instance, make, schedule, totals):
            passed += 1
        else:
            failed += 1
    if scheduler_fidelity(py, vpy, out):
        passed += 1
    else:
        failed += 1
    if totals["preemptions"] == 0 or totals["chunked"] == 0:
        print(
            f"FAILED: the passing cases executed {totals['preemptions']} preemption(s) and "
            f"{totals['chunked']} chunked prefill(s); at least one of each is required"
        )
        failed += 1
    print(f"vllm-e2e: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
