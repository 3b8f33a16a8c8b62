"""The layout of the compiled engine's state arrays, shared by its kernels and its driver.

:mod:`.fastengine` (the numba kernels) and :mod:`.fastsim` (the Python driver that allocates the
arrays and reads the results) index the same arrays; each tuple names their rows or slots in order,
and each module turns a tuple into indexes (position = index). This module imports nothing, so the
driver runs a kernel compiled ahead of time without importing numba.
"""

from __future__ import annotations

__all__ = ["D_SLOTS", "F_SLOTS", "L_SLOTS", "Q_ROWS", "S_SLOTS"]

#: Rows of the per-request state Q: KV held, prompt (grown by evictions), tokens generated, KV
#: reserved for an eviction-free request, the last batch it was in, output length, priority rank,
#: dynamic key, whether its decodes are deferred (``tpot_shed``), whether its decode waits for the end of
#: the batch being built (deferred, or optional by the laxity rule ``tpot_lazy``).
Q_ROWS = ("m", "prompt", "gen", "fixed", "mark", "out", "rank", "key", "shed", "skip")
#: Scalars S: KV reserved, running count, waiting head and length, items, evictions.
S_SLOTS = ("kv_reserved", "running", "waiting_head", "waiting_length", "items", "evictions")
#: The batch being built D (the reference engine's draft; its prefill budget: P, or the adaptive share's).
D_SLOTS = (
    "number", "tokens", "prefill_tokens", "prefill_squares", "decodes", "decode_kv", "prefill_context",
    "max_kv", "phase", "generating", "items", "evictions", "cut", "prefill_budget",
)  # fmt: skip
#: Flags F, in the order of :class:`~optsched.policies.config.PolicyConfig`'s switches.
F_SLOTS = (
    "hybrid", "chunked", "eviction_free", "prefill_counts_decodes", "evict_for_waiting", "evicted_to_front",
    "fcfs", "dynamic_order", "kv_lookahead", "ttft_drop", "tpot_shed", "tpot_lazy",
)  # fmt: skip
#: Limits L: token budget C, prefill chunk P, KV capacity M (whole blocks), R_max, KV block, watermark,
#: tokens per tile of the adaptive prompt share (``prefill_tile``).
L_SLOTS = ("token_budget", "chunk", "kv_capacity", "max_running", "kv_block", "watermark", "prefill_tile")
