"""Seeded GSM8K-like instances for the Hybrid paper's experiments (seed003 Sec. V, digest U6).

Table III gives only moments: inputs mean 68.43 / sd 25.04 (GSM8K test set), outputs mean 344.83 / sd
187.99 with the output capped at 512 tokens. Following digest U6 (an assumption, the paper does not give
its generator), lengths are Normal draws rounded and clipped: inputs to [1, 128], outputs to [1, 512].
``moments='matched'`` instead draws from the Normal whose *clipped* version has the paper's mean and sd
(found by :func:`matched_normal`; the outputs then pile up at 1 and 512, which the paper's mean 344.83 /
sd 187.99 under a 512 cap implies). The literal draw (default) has an output mean of about 328.
All requests arrive at 0 (an offline batch). Limits: J = ``clients`` (``max_running``), prefill stages of
at most 2048 tokens (the digest's largest level N^cap_L, which reproduces t^p* ~ 13 s), KV capacity
1024 blocks x 128 tokens = 131072 (Sec. V-A).
"""

from __future__ import annotations

import math

import numpy as np

from ...costmodel import load_cost_model
from ...instance import Instance, Limits, Request

__all__ = ["clipped_moments", "gsm8k_like", "matched_normal"]

PROMPT_MEAN, PROMPT_SD, PROMPT_MAX = 68.43, 25.04, 128
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


def gsm8k_like(
    seed: int, requests: int = 1319, clients: int = 200, stage_tokens: int = 2048, moments: str = "literal"
) -> Instance:
    """A GSM8K-like offline batch on the ``llama-65b-ascend8`` profile.

    Parameters
    ----------
    seed
        NumPy ``default_rng`` seed.
    requests, clients
        I and J (paper: 1319 and 200).
    stage_tokens
        Prefill budget per stage (the largest level N^cap_L).
    moments
        ``literal`` (Normal(mean, sd) clipped) or ``matched`` (clipped lengths have the paper's moments).
    """
    if moments not in ("literal", "matched"):
        raise ValueError(f"unknown moments {moments!r} (known: literal, matched)")
    p_mu, p_sd, o_mu, o_sd = PROMPT_MEAN, PROMPT_SD, OUTPUT_MEAN, OUTPUT_SD
    if moments == "matched":
        p_mu, p_sd = matched_normal(PROMPT_MEAN, PROMPT_SD, 1, PROMPT_MAX)
        o_mu, o_sd = matched_normal(OUTPUT_MEAN, OUTPUT_SD, 1, OUTPUT_MAX)
    rng = np.random.default_rng(seed)
    prompts = np.clip(np.rint(rng.normal(p_mu, p_sd, requests)), 1, PROMPT_MAX).astype(int)
    outputs = np.clip(np.rint(rng.normal(o_mu, o_sd, requests)), 1, OUTPUT_MAX).astype(int)
    reqs = tuple(
        Request(id=f"q{i}", arrival=0.0, prompt_tokens=int(p), output_tokens=int(o))
        for i, (p, o) in enumerate(zip(prompts, outputs))
    )
    limits = Limits(token_budget=stage_tokens, prefill_budget=stage_tokens, kv_capacity=1024 * 128, max_running=clients)
    return Instance(f"gsm8k-like-{moments}-{seed}-{requests}x{clients}", load_cost_model("llama-65b-ascend8"), limits, reqs)
