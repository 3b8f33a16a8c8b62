"""Priority keys and the KV look-ahead admission test of the unified scheduler's policies.

Each order of :data:`optsched.policies.config.ORDERS` is a pure function of per-request quantities
(:func:`order_key`): the request's current prompt length ``prompt`` (it grows after a decode-phase
eviction), its KV slots ``m``, its initial prompt and output lengths, its arrival and the engine's
index (the last tie-breaker). A smaller key is served first.

============================  ===========================================  =======
order                         key                                          dynamic
============================  ===========================================  =======
``arrival``                   (arrival, index)                             no
``prompt``                    (initial prompt I, arrival, index)           no
``output``                    (output length O, arrival, index)            no
``remaining-prefill``         (prompt - m, arrival, index)                 yes
============================  ===========================================  =======

A *dynamic* key changes while the request runs (``m`` grows with every prefill chunk): the engine
recomputes it for the running requests before each batch and re-sorts them.

KV look-ahead (MC-SF)
---------------------
Jaillet, Jiang, Mellou, Molinaro, Podimata and Zhou ("Online Scheduling for LLM Inference with KV
Cache Constraints", 2025) admit waiting requests, shortest output first, while the KV cache the
running requests and the admitted ones need stays within M at *every future* iteration, given the
known output lengths. :func:`lookahead_fits` is that test. Each request j is projected to finish
its prompt in the next iteration and then decode one token per iteration: with g_j tokens
generated, it has d_j = O_j - g_j iterations left and ends holding its peak
p_j = max(m_j, prompt_j) + d_j - [m_j < prompt_j] KV slots (prompt + O - 1 for a fresh request).
At the k-th iteration from now (k = 1 is the batch being built) it holds at most p_j - d_j + k
slots while k <= d_j and none after, so the projected use is
sum over {j: d_j >= k} of (p_j - d_j + k). It grows with k between finish points, so it is
largest at some k = d_j: the test checks those. The projection is a heuristic (a request left out
of a batch finishes later than projected); the engine's reservations still bound the real use and
evict when they must.
"""

from __future__ import annotations

__all__ = ["DYNAMIC_ORDERS", "lookahead_fits", "order_key", "projection"]

#: Orders whose key changes while a request runs (the engine re-sorts before each batch).
DYNAMIC_ORDERS = frozenset({"remaining-prefill"})


def order_key(
    order: str, prompt: int, m: int, initial_prompt: int, output: int, arrival: float, index: int
) -> tuple[float, ...]:
    """The priority key of one request under ``order`` (module docstring's table; smaller first)."""
    if order == "arrival":
        return (arrival, index)
    if order == "prompt":
        return (initial_prompt, arrival, index)
    if order == "output":
        return (output, arrival, index)
    if order == "remaining-prefill":
        return (prompt - m, arrival, index)
    raise ValueError(f"unknown order {order!r}")


def projection(prompt: int, m: int, output: int, generated: int) -> tuple[int, int]:
    """(peak p, iterations left d) of a request in the look-ahead's projection (module docstring)."""
    left = output - generated
    if m < prompt:
        return prompt + left - 1, left
    return m + left, left


def lookahead_fits(requests: list[tuple[int, int]], capacity: float) -> bool:
    """Whether requests given as (peak p, iterations left d) fit in ``capacity`` KV slots at every
    future iteration of the projection: sum over {d_j >= k} of (p_j - d_j + k) <= capacity for
    every k = d_j."""
    base = count = 0
    ordered = sorted(requests, key=lambda pd: -pd[1])
    for n, (peak, left) in enumerate(ordered):
        base += peak - left
        count += 1
        if (n + 1 == len(ordered) or ordered[n + 1][1] != left) and base + left * count > capacity:
            return False
    return True
