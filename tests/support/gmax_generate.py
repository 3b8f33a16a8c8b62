"""Random static-batching instances in the setting of the SLO-aware paper's experiments (Section 5.1).

A shuffled, even mix of two task types (odd N: one more chat request):

- ``"chat"`` (ShareGPT-like, h = 0): SLOs TTFT 10 s and TPOT 50 ms; prompt and output lengths
  log-normal (medians 300 and 250 tokens);
- ``"e2e"`` (Python-Code-like, h = 1): SLO e2e 30 s; prompt uniform in 100..500 tokens, output
  normal(175, 60) tokens, which matches the paper's "3 s per average code request" under Table 2.

Every request keeps prompt + output below 2,000 tokens ("request lengths in both datasets are
restricted to under 2k"). The datasets themselves are not shipped; these distributions are a
documented stand-in (docs/gmax.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["random_gmax_instance"]

MAX_TOTAL = 1999


def random_gmax_instance(
    n: int,
    seed: int,
    max_batch_size: int = 4,
    static_latency: str | dict = "qwen2.5-7b-2xv100",
    slo_e2e: float = 30.0,
    slo_ttft: float = 10.0,
    slo_tpot: float = 0.05,
) -> dict[str, Any]:
    """The JSON object of a random instance (parse it with ``optsched.instance.parse_instance``)."""
    rng = np.random.default_rng(seed)
    tasks = ["chat"] * ((n + 1) // 2) + ["e2e"] * (n // 2)
    rng.shuffle(tasks)
    requests = []
    for j, task in enumerate(tasks):
        if task == "chat":
            prompt = int(np.clip(rng.lognormal(np.log(300), 0.9), 16, 1500))
            output = int(np.clip(rng.lognormal(np.log(250), 0.8), 8, MAX_TOTAL - prompt))
            slo = {"ttft": slo_ttft, "tpot": slo_tpot}
        else:
            prompt = int(rng.integers(100, 501))
            output = int(np.clip(rng.normal(175, 60), 20, MAX_TOTAL - prompt))
            slo = {"e2e": slo_e2e}
        requests.append({
            "id": f"r{j}",
            "arrival": 0.0,
            "prompt_tokens": prompt,
            "output_tokens": output,
            "task": task,
            "slo": slo,
        })
    return {
        "name": f"gmax-rand-n{n}-b{max_batch_size}-s{seed}",
        "cost_model": "llama2-7b-a100",
        "static_latency": static_latency,
        "max_batch_size": max_batch_size,
        "requests": requests,
    }
