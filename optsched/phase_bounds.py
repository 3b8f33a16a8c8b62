r"""Mean latency as first token plus the rest: ``ttft-plus-rest`` and ``block-ttft-plus-rest``.

A request's end-to-end latency splits at its first token: :math:`F_i - r_i = (FT_i - r_i) + (F_i -
FT_i)`, with :math:`FT_i` the end of the batch generating token 1 and :math:`F_i` the end of the one
generating token :math:`O_i`. The load-aware TTFT bounds (:mod:`optsched.load_bounds`,
:mod:`optsched.ttft_bounds`, :mod:`optsched.ttft_block_bounds`) price the queue of prompts waiting
to be prefilled; the latency bounds built on whole requests (``srpt-work``, the pair bounds) price
that queue only through shares of the work. The bounds here add the two parts, each bounded on its
own. They hold for every schedule that replays cleanly under the contract (any policy, any
formulation, evictions or not) and use only the facts (F1)-(F3) of :mod:`optsched.bounds`.

**The rest after the first token.** Tokens :math:`2, \dots, O_i` of request i are each generated
by a distinct batch (at most one token of a request per batch, (F3)) that starts after the batch
generating the token before it ends: a decode item needs the previous token generated, and a
re-prefill after an eviction follows the batch that generated the token before it (its chunks, in
batches after that one, end with the batch generating the next token). Batches are sequential
(F1), so these batches lie in :math:`(FT_i, F_i]`, disjoint, each at least the time of its own item
alone ((F2): dropping items never raises a batch's time). The least lone time of token
:math:`g + 1` is :math:`\min(D_i(g), R_i(g))`, a lone decode reading :math:`I_i + g - 1` slots or a
lone re-prefill of at least :math:`I_i + g` tokens (the terms of ``critical-path`` in
:mod:`optsched.bounds`), so

.. math:: F_i - FT_i \ge \ell_i = \sum_{g=1}^{O_i - 1} \min(D_i(g), R_i(g)),

the part of :math:`A_i` after the prefill (:func:`optsched.bounds.request_bound_arrays`: latency
bound less TTFT bound; ``optsched info`` reads the same quantity for TPOT).

**The sum.** For any proven lower bound :math:`B` on the mean TTFT of every schedule,

.. math:: \text{mean latency} = \frac1N \sum_i (FT_i - r_i) + \frac1N \sum_i (F_i - FT_i)
          \ge B + \frac1N \sum_i \ell_i .

``ttft-plus-rest`` takes for :math:`B` the best of the TTFT bounds that need no solver
(``srpt-prefill``, ``srpt-prefill-flush``, ``pair-interference-prefill``,
:func:`optsched.load_bounds.load_bounds` with objective ``ttft``); ``block-ttft-plus-rest`` takes
``block-flush-ttft`` (:func:`optsched.ttft_block_bounds.block_bound`, a search within a time
limit), which the InferMax bounder lists for ``latency``. Both gain where a burst of long prompts
queues for prefill (the first-token queue is the whole difference), and add nothing where
requests' first tokens come at once: the rest is priced alone.
"""

from __future__ import annotations

import math

import numpy as np

from .bounds import request_bound_arrays
from .instance import Instance
from .result import Bound

__all__ = ["SAFETY", "rest_after_first_token", "ttft_plus_rest"]

#: Relative safety margin taken off every value (floating-point sums).
SAFETY = 1e-12


def rest_after_first_token(instance: Instance) -> np.ndarray:
    r"""The :math:`\ell_i` of the module docstring, seconds, in request order: the least time alone of
    each request's tokens 2 to :math:`O_i`, all in batches after its first token's."""
    _, I, O = instance.columns
    first, whole, _ = request_bound_arrays(instance, I, O)
    return np.maximum(whole - first, 0.0)


def ttft_plus_rest(instance: Instance, ttft: Bound, name: str = "ttft-plus-rest") -> Bound:
    """The mean-latency :class:`~optsched.result.Bound` (seconds) of the module docstring from the proven
    mean-TTFT bound ``ttft``: its value plus the mean of :func:`rest_after_first_token`, less the safety
    margin; ``valid`` only when ``ttft`` is."""
    rest = rest_after_first_token(instance)
    mean_rest = math.fsum(rest) / len(rest) if len(rest) else 0.0
    value = max(0.0, (ttft.value + mean_rest) * (1.0 - SAFETY))
    note = (
        f"mean TTFT bound {ttft.name} ({ttft.value:.6g} s) + mean least time alone of tokens 2..O after "
        f"the first ({mean_rest:.6g} s) (optsched/phase_bounds.py)"
    )
    return Bound(name, value, ttft.valid, note)
