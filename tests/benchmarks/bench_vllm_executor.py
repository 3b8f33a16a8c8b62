"""Predicted vs measured step times of a simulated schedule replayed on vLLM (docs/performance.md).

Usage (the vLLM venv from tests/e2e/vllm_env.sh; OMP_NUM_THREADS=1 on a shared 2-core machine)::

    OMP_NUM_THREADS=1 python tests/benchmarks/bench_vllm_executor.py \
        --vllm-python .ci/vllm-venv/bin/python --model tiny-llama --out /tmp/bench-vllm

Builds a 24-request instance with staggered arrivals and mixed lengths under the
``llama2-7b-a100`` profile, simulates it with a policy (default ``sarathi``), exports it (KV blocks of
32 tokens), executes it on vLLM (``--repeats`` measured passes) and validates: MAPE of the profile's
prediction, total error, and the MAPE of the profile refitted from the measured steps (in-sample)
and of a refit on the even steps checked on the odd ones (out-of-sample).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from optsched.costfit import fit_terms
from optsched.executor.compare import compare


def instance(n: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    reqs = []
    t = 0.0
    for i in range(n):
        t += float(rng.exponential(0.01))
        reqs.append({
            "id": f"r{i}",
            "arrival": round(t, 6),
            "prompt_tokens": int(rng.integers(16, 200)),
            "output_tokens": int(rng.integers(2, 40)),
        })
    return {
        "name": f"bench-vllm-{n}",
        "cost_model": "llama2-7b-a100",
        "limits": {"token_budget": 256, "prefill_budget": 256, "kv_capacity": 1024, "max_running": 16},
        "requests": reqs,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vllm-python", required=True)
    ap.add_argument("--model", default="tiny-llama")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--policy", default="sarathi")
    ap.add_argument("--requests", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default="/tmp/bench-vllm")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    inst = out / "instance.json"
    inst.write_text(json.dumps(instance(args.requests, 7), indent=1))
    opt = [sys.executable, "-m", "optsched.cli"]
    sched, plan, result = out / "schedule.json", out / "plan.json", out / "result.json"
    subprocess.run(
        opt + ["simulate", str(inst), "--policy", args.policy, "--out", str(sched)], check=True, capture_output=True
    )
    m = json.loads(inst.read_text())["limits"]["kv_capacity"]
    subprocess.run(
        opt
        + [
            "export",
            str(sched),
            "--instance",
            str(inst),
            "--format",
            "vllm-replay",
            "--block-size",
            "32",
            "--kv-blocks",
            str(-(-m // 32) + args.requests),
            "--out",
            str(plan),
        ],
        check=True,
    )
    proc = subprocess.run(
        [
            args.vllm_python,
            "-m",
            "optsched.cli",
            "execute",
            str(plan),
            "--model",
            args.model,
            "--dtype",
            args.dtype,
            "--repeats",
            str(args.repeats),
            "--out",
            str(result),
        ],
        capture_output=True,
        text=True,
    )
    res = json.loads(result.read_text())
    if not res["ok"]:
        print("FAILED:", res["mismatches"], res["length_errors"], proc.stderr[-2000:])
        return 1
    rep = compare(res)
    plan_data = res["plan"]
    pre = sum(len(s["preempt"]) for s in plan_data["steps"])
    rows = rep["steps"]
    feats = np.array([r["features"] for r in rows])
    meas = np.array([r["measured"] for r in rows])
    train, test = np.arange(len(rows)) % 2 == 0, np.arange(len(rows)) % 2 == 1
    fit = fit_terms(feats[train], meas[train])
    pred_test = np.array([fit.model.batch_time(*f) for f in feats[test]])
    oos = float(100 * np.mean(np.abs(pred_test - meas[test]) / meas[test]))
    print(
        f"device {res['run']['device']}, vllm {res['run']['vllm']}, model {args.model}, {args.dtype}, "
        f"policy {args.policy}, {args.requests} requests, {len(res['steps'])} steps, {pre} preemptions, "
        f"0 mismatches"
    )
    print(
        f"profile llama2-7b-a100: predicted {rep['predicted_total'] * 1e3:.1f} ms, measured "
        f"{rep['measured_total'] * 1e3:.1f} ms (total error {rep['total_error_pct']:+.1f} %), MAPE {rep['mape']:.1f} %"
    )
    print(
        f"refit (all terms, in-sample): MAPE {rep['fit_terms']['mape']:.1f} %; "
        f"linear: MAPE {rep['fit_linear']['mape']:.1f} %; "
        f"refit on even steps, checked on odd steps: MAPE {oos:.1f} %"
    )
    print("refitted profile:", json.dumps(rep["fit_terms"]["profile"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
