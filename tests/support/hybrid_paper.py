"""The Hybrid paper's offline batches (seed003 Sec. V; docs/hybrid.md, U6), for the tests and benchmarks.

The lengths are those of :func:`optsched.generators.gsm8k_like` (Table III's moments: inputs mean 68.43 /
sd 25.04, outputs mean 344.83 / sd 187.99, Normal draws rounded and clipped to [1, 512]; all requests
arrive at 0); :func:`paper_limits` are the paper's limits: J = ``clients`` (``max_running``), prefill
stages of at most 2048 tokens (the largest level N^cap_L of docs/hybrid.md, O3, which reproduces
t^p* ~ 13 s) and a KV capacity of 1024 blocks x 128 tokens = 131072 (Sec. V-A).

The paper gives only moments, and its output mean 344.83 / sd 187.99 are those of outputs capped at 512;
a literal clipped draw has an output mean of about 328. ``moments='matched'`` of :func:`paper_batch`
draws from the Normal whose *clipped* version has the paper's mean and sd (:func:`matched_normal`; the
outputs then pile up at 1 and 512, which those moments under a 512 cap imply).
"""

from __future__ import annotations

import math

from optsched.generators import ClippedNormal, generate, gsm8k_like
from optsched.instance import Instance

__all__ = ["clipped_moments", "matched_normal", "paper_batch", "paper_limits"]

PROMPT_MEAN, PROMPT_SD, PROMPT_MAX = 68.43, 25.04, 512
OUTPUT_MEAN, OUTPUT_SD, OUTPUT_MAX = 344.83, 187.99, 512


def clipped_moments(mu: float, sd: float, lo: float, hi: float) -> tuple[float, float]:
    """Mean and sd of ``clip(X, lo, hi)`` for ``X ~ Normal(mu, sd)`` (closed form)."""
    pdf = lambda z: math.exp(-z * z / 2) / math.sqrt(2 * math.pi)  # noqa: E731
    cdf = lambda z: 0.5 * (1 + math.erf(z / math.sqrt(2)))  # noqa: E731
    a, b = (lo - mu) / sd, (hi - mu) / sd
    inside = cdf(b) - cdf(a)
    m1 = mu * inside + sd * (pdf(a) - pdf(b))
    m2 = (mu * mu + sd * sd) * inside + 2 * mu * sd * (pdf(a) - pdf(b)) + sd * sd * (a * pdf(a) - b * pdf(b))
    mean = lo * cdf(a) + hi * (1 - cdf(b)) + m1
    return mean, math.sqrt(max(0.0, lo * lo * cdf(a) + hi * hi * (1 - cdf(b)) + m2 - mean * mean))


def matched_normal(mean: float, sd: float, lo: float, hi: float, iterations: int = 500) -> tuple[float, float]:
    """``(mu, sigma)`` whose Normal, clipped to [lo, hi], has the given mean and sd (fixed-point iteration)."""
    mu, sigma = mean, sd
    for _ in range(iterations):
        m, s = clipped_moments(mu, sigma, lo, hi)
        mu, sigma = mu + (mean - m), sigma * sd / s
    return mu, sigma


def paper_limits(clients: int = 200, stage_tokens: int = 2048) -> dict[str, int]:
    """The paper's limits: ``clients`` requests running at once (J), prefill stages of at most
    ``stage_tokens`` tokens (the largest level N^cap_L), 1024 KV blocks of 128 tokens."""
    return {
        "token_budget": stage_tokens,
        "prefill_budget": stage_tokens,
        "kv_capacity": 1024 * 128,
        "max_running": clients,
    }


def paper_batch(
    seed: int, requests: int = 1319, clients: int = 200, stage_tokens: int = 2048, moments: str = "literal"
) -> Instance:
    """A GSM8K-like offline batch on the ``llama-65b-ascend8`` profile under :func:`paper_limits`.

    Parameters
    ----------
    seed
        NumPy ``default_rng`` seed.
    requests, clients
        I and J (paper: 1319 and 200).
    stage_tokens
        Prefill budget per stage (the largest level N^cap_L).
    moments
        ``literal``: :func:`optsched.generators.gsm8k_like` itself (Normal(mean, sd) clipped);
        ``matched``: clipped lengths with the paper's moments.
    """
    if moments not in ("literal", "matched"):
        raise ValueError(f"unknown moments {moments!r} (known: literal, matched)")
    limits = paper_limits(clients, stage_tokens)
    if moments == "literal":
        return gsm8k_like(seed, n=requests, limits=limits)
    types = [
        (
            ClippedNormal(*matched_normal(PROMPT_MEAN, PROMPT_SD, 1, PROMPT_MAX), 1, PROMPT_MAX),
            ClippedNormal(*matched_normal(OUTPUT_MEAN, OUTPUT_SD, 1, OUTPUT_MAX), 1, OUTPUT_MAX),
        )
    ]
    return generate(
        requests,
        types,
        name=f"gsm8k-like-matched-{requests}",
        cost_model="llama-65b-ascend8",
        limits=limits,
        seed=seed,
        source="Hybrid paper (seed003) GSM8K moments matched after clipping; lengths synthetic",
    )
