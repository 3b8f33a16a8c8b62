r"""A lower bound on mean TTFT that prices the batch a first token waits for: ``srpt-prefill-flush``.

The bound ``srpt-prefill`` of :mod:`optsched.load_bounds` relaxes the engine to one machine that
processes each request's prefill work; a request's first token comes as soon as its own work is
done, and each batch's overhead is only shared out over its items. In a real schedule the first
token of a request is the *end* of the batch that completes its prompt, and that batch pays its
overhead before it ends. The bound here moves each batch's whole overhead to the end of the batch
in the relaxation, so that every first token waits for one full overhead after the work that
decides it. It holds for every schedule that replays cleanly under the contract (any policy, any
formulation, evictions or not; the argument never uses the KV capacity, C, P or :math:`R_{max}`,
so it holds whatever limits a schedule meets), and uses only the facts (F0)-(F5) of
:mod:`optsched.bounds`.

**Proof.** Fix a schedule with first-token times :math:`FT_i`. By (F0) it is enough to prove the
bound under the profile's linear twin, whose times are at most the profile's. Keep, in every batch,
only the items of each request up to the batch generating its first token (prefill chunks: a first
token needs its prompt prefilled, (F3)); dropping items never raises a batch's time (F2). A batch B
with a kept item holds a prefill item, so by (F2) its time is at least

.. math:: T_B \ge \beta_p + \sum_{y \in B} c_y, \qquad \beta_p = L(b + p_b),

with :math:`c_y` the item terms of the linear twin: :math:`L(a + p_a) c + L p_q c^2 + L p_x c S` for a
chunk of c tokens after S tokens of its request's KV (a the twin's ``per_token``, tiles included
as :math:`t_c / t` per token). Inside :math:`[s_B, e_B]` run the kept item terms one after the other
from :math:`s_B`; they end by :math:`e_B - \beta_p`. This is a preemptive schedule of one machine in
which job i is released at :math:`r_i` (a batch holding i's item starts after its arrival, (F1)),
gets at least :math:`p_i` of processing (its chunks' terms up to its first token: at least
:math:`L(a + p_a + p_q) I_i` plus the least attention of the pass that builds its KV from empty,
:func:`optsched.load_bounds.prompt_attention_extra`; :func:`optsched.load_bounds.share_terms` with
``first_tokens``, column 0) and, stopped once it has had :math:`p_i`, completes by
:math:`C_i \le FT_i - \beta_p` (its last kept item is in the batch that ends at :math:`FT_i`).
Batches are sequential (F1), so the pieces do not overlap. Preemptive SRPT completes, by every
time, the most jobs any preemptive schedule completes (Schrage 1968, as in
:mod:`optsched.load_bounds`), so the k-th smallest :math:`C_i` is at least SRPT's k-th completion
:math:`S_{(k)}`, and the k-th smallest :math:`FT_i` at least :math:`S_{(k)} + \beta_p`. Every
:math:`FT_i \ge r_i + F(I_i)` (the least prefill alone, :func:`optsched.bounds.prefill_alone_time`),
so the k-th smallest :math:`FT_i` is also at least the k-th smallest :math:`e_{(k)}` of
:math:`r_i + F(I_i)`. Summing,

.. math:: \text{mean TTFT} \ge \frac1N \Big(\sum_k \max(S_{(k)} + \beta_p, e_{(k)}) - \sum_i r_i\Big).

``srpt-prefill`` spends the same overhead as shares of the items' work instead (it is the better
of the two where batches are large and the shares add up); this bound is the better where first
tokens queue behind one another, each behind a batch end. It costs one SRPT run, O(N log N), which
:func:`optsched.load_bounds.load_bounds` shares with ``srpt-prefill`` (it runs SRPT on the work
without shares, :func:`optsched.load_bounds.srpt_completions`, and passes the completions here).
"""

from __future__ import annotations

import math

import numpy as np

from .costmodel import Coefficients
from .instance import Instance
from .result import Bound

__all__ = ["SAFETY", "flush_bound", "flush_mean_bound", "flush_overhead"]

#: Relative safety margin taken off every value (floating-point sums).
SAFETY = 1e-12


def flush_overhead(instance: Instance) -> float:
    """beta_p of the module docstring: the least overhead of a batch holding a prefill item under
    the profile's linear twin, L (base + prefill bias), in seconds."""
    coef = Coefficients.of(instance.cost_model.linear_twin())
    return coef.layers * (coef.base + coef.prefill_bias)


def flush_mean_bound(completions: np.ndarray, release: np.ndarray, alone: np.ndarray, overhead: float) -> float:
    """(1/N) (sum_k max(S_(k) + beta_p, e_(k)) - sum_i r_i) of the module docstring, less the safety margin.

    ``completions``: SRPT's completions S_(k), ascending, of the jobs (release, prefill work p_i);
    ``alone``: F(I_i) per request; ``overhead``: beta_p (a test plants a larger, invalid one).
    """
    if len(release) == 0:
        return 0.0
    first = np.maximum(np.asarray(completions) + overhead, np.sort(release + alone))
    total = math.fsum(first) - math.fsum(release)
    scale = math.fsum(np.abs(first)) + math.fsum(np.abs(release))
    return max(0.0, (total - SAFETY * scale) / len(release))


def flush_bound(instance: Instance, value: float) -> Bound:
    """The ``srpt-prefill-flush`` :class:`~optsched.result.Bound` of value ``value`` (seconds) with its note."""
    note = (
        "one machine, SRPT over each request's prefill work, every first token a whole batch overhead "
        f"({flush_overhead(instance):.3g} s) after its work, sorted against arrival + least prefill alone "
        "(optsched/ttft_bounds.py)"
    )
    return Bound("srpt-prefill-flush", value, True, note)
