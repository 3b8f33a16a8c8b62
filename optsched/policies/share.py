"""The adaptive prompt share of the unified scheduler (``PolicyConfig.prefill_share``).

Under decode-first hybrid batching every running decode is in every batch, so each batch's time is
shared by the requests past their first token (they wait for it) and the prompts' chunks (the
prompts waiting for their first token wait for those). A fixed prefill budget P serves both sides
the same whatever their numbers; the adaptive share sizes the prompt side of a batch by how many
prompts wait per decoding request. In a batch that starts while D > 0 running requests decode and
W requests wait for their prompt (R_w and the running prefills), the prefill budget is

    P_b = min(P, tile * max(1, floor(s W / D + 1/2)))

tokens (s = ``prefill_share`` tiles of ``prefill_tile`` tokens per waiting prompt per decode; the
rounding is half up); with D = 0 it is P. P_b takes P's place in the budget test of GetNextBatch
(docs/policies.md, step 2), so B4 (``prefill_counts_decodes``) and every other limit apply as
before. P_b <= P, and C, M (reservations, the look-ahead) and R_max are checked by the engine as
for any policy, so every schedule respects the instance's limits.

:func:`batch_prefill_budget` is the rule; the reference engine calls it and the compiled engine
compiles the same function (:mod:`.fastengine`), so both compute the same budget from the same
counts, with the same floating-point operations in the same order.
"""

from __future__ import annotations

import math

__all__ = ["batch_prefill_budget"]


def batch_prefill_budget(budget: int, share: float, tile: int, waiting: int, decoding: int) -> int:
    """The prefill budget P_b of a batch (module docstring).

    Parameters
    ----------
    budget
        The policy's prefill budget P (tokens).
    share
        ``prefill_share`` s; 0 for none (the budget is then P).
    tile
        ``prefill_tile`` (tokens).
    waiting
        W: requests waiting for their prompt when the batch starts (R_w and the running prefills).
    decoding
        D: running requests in their decode phase when the batch starts.

    Returns
    -------
    int
        ``min(P, tile * max(1, floor(s W / D + 1/2)))``, or P where ``decoding`` or ``share`` is 0.
    """
    if decoding == 0 or share <= 0:
        return budget
    tiles = max(1, math.floor(share * waiting / decoding + 0.5))
    return min(budget, tiles * tile)
