r"""TPOT cost rows with one multiplier per request: the tightest of the TPOT pricing's fluid form.

:mod:`.tpot_pricing` adds :math:`\mu \ge 0` times the summed TPOT inequality
:math:`\sum_{i \in H} \sum_{j \in B_i} T_j \le \sum_{i \in H} \pi_i (O_i - 1)` to a window's time
inequality, with one :math:`\mu` shared by all requests; a request's bracket is largest at a
:math:`\mu` that grows with its own decode item terms and overheads, so a shared :math:`\mu` prices
most requests away from their best. This module gives every request its own multiplier. Notation
as in :mod:`.tpot_pricing` (:math:`H`, :math:`B_i`, :math:`\beta_j = b_\theta + L d_x K_j`, the
decode item term :math:`\delta^d_{ig}`, the re-prefill term :math:`\delta^r_{ig}` and the overhead
:math:`\beta_{ig} = b_\theta + L d_x (I_i + g - 1)` of token :math:`g + 1`).

Proof
-----
Take an interval :math:`[s, e]`, its met requests Q and H as in :mod:`.tpot_pricing`. For every
:math:`i \in H`, :math:`\sum_{j \in B_i} T_j \le \pi_i (O_i - 1)` (the batches of :math:`B_i` are
sequential and lie in its decode span). Add :math:`\mu_i \ge 0` times each of these (any
:math:`\mu_i` fixed by the instance, not by the schedule) to :math:`\sum_j T_j \le e - s`:

.. math::

    \sum_j (1 + M_j) T_j \le (e - s) + \sum_{i \in H} \mu_i \pi_i (O_i - 1),
    \qquad M_j = \sum_{i \in H,\, j \in B_i} \mu_i .

A request holds at most one item per batch. For a batch j, let :math:`x` range over its items of
the requests :math:`i \in H` with :math:`j \in B_i` (item term :math:`\delta_x`, owner's multiplier
:math:`\mu_x`, so :math:`M_j = \sum_x \mu_x`): :math:`T_j \ge \beta_j + \sum_x \delta_x` plus the
terms of the other items, so :math:`(1 + M_j) T_j` is at least those other terms
and the item terms of H (each once) plus

.. math::

    \beta_j + \Big(\sum_x \delta_x\Big)\Big(\sum_x \mu_x\Big) + \beta_j \sum_x \mu_x
    \ge \beta_j + S^2 + \sum_x \mu_x \beta_j
    \ge \sum_x \big(2 \sqrt{\beta_j \mu_x \delta_x} + \mu_x \beta_j\big),
    \qquad S = \sum_x \sqrt{\mu_x \delta_x},

by Cauchy-Schwarz (:math:`(\sum \delta_x)(\sum \mu_x) \ge S^2`) and AM-GM
(:math:`\beta_j + S^2 \ge 2 \sqrt{\beta_j} S`). Each term grows with :math:`\beta_j`, and
:math:`\beta_j \ge \beta_{ig}` for a decode item of token :math:`g + 1` of i (its context is
:math:`K_j \ge I_i + g - 1`), :math:`\beta_j \ge b_\theta` for a re-prefill chunk; re-prefill groups
are priced by subadditivity of :math:`\sqrt{\cdot}` as in :mod:`.tpot_pricing`. So every met set of
the window satisfies :math:`\sum_Q c_i \le e - s` with the cost of :mod:`.tpot_pricing`, :math:`\mu`
replaced by :math:`\mu_i`:

.. math::

    c_i = w_i + L\,pb\,I_i / P + [i \in H] \Big( \sum_{g=1}^{O_i - 1} \min\big(
          2 \sqrt{\mu_i \beta_{ig} \delta^d_{ig}} + \mu_i \beta_{ig},\;
          2 \sqrt{\mu_i b_\theta \delta^r_{ig}} + \mu_i b_\theta \big) - \mu_i \pi_i (O_i - 1) \Big).

Choice of :math:`\mu_i`: with only the decode terms and each token's overhead and item term
replaced by the request's means :math:`\bar\beta_i = B_i / (O_i - 1)` and :math:`\bar\delta_i =
\Delta_i / (O_i - 1)` (:math:`B_i = \sum_g \beta_{ig}`, :math:`\Delta_i = \sum_g \delta^d_{ig}`,
:math:`C_i = \pi_i (O_i - 1)`), the bracket is :math:`2 \sqrt{\mu_i B_i \Delta_i} - \mu_i (C_i -
B_i)`, largest at :math:`\mu_i = B_i \Delta_i / (C_i - B_i)^2` (0 when :math:`C_i \le B_i`), where it
is :math:`B_i \Delta_i / (C_i - B_i)`: the fluid form of :mod:`.tpot_pricing` for this request
alone. :func:`own_rows` evaluates the exact bracket (every token's own terms, the re-prefill
minimum) at that :math:`\mu_i`, which depends on the instance only, so the row is valid.
"""

from __future__ import annotations

import numpy as np

from ...budget import NO_LIMIT, TimeBudget
from .tpot_pricing import TpotPricing

__all__ = ["own_multipliers", "own_rows"]


def own_multipliers(p: TpotPricing, span: np.ndarray) -> np.ndarray:
    """:math:`\\mu_i = B_i \\Delta_i / (C_i - B_i)^2` per request (0 where :math:`C_i \\le B_i`),
    ``span`` the :math:`C_i = \\pi_i (O_i - 1)` in seconds (module docstring)."""
    room = span - p.decode_overheads
    with np.errstate(divide="ignore", invalid="ignore"):
        mu = p.decode_overheads * p.decode_items / room**2
    return np.where((room > 0) & np.isfinite(room), mu, 0.0)


def own_rows(
    pricing: tuple[TpotPricing, ...],
    output: np.ndarray,
    tpot: np.ndarray,
    members: np.ndarray,
    budget: TimeBudget = NO_LIMIT,
) -> tuple[np.ndarray, np.ndarray]:
    """Cost rows (whole request, first token) for the windows, one per tile weight, with a multiplier
    per request, over the requests ``members`` (a mask) of outputs ``output`` and TPOT targets
    ``tpot`` (seconds, slack included, inf where none; both of the members only); the arguments,
    ``budget`` included, as :func:`.tpot_pricing.tpot_rows`."""
    later = np.maximum(output - 1, 0).astype(np.float64)
    n = len(output)
    full, first = [], []
    for p in pricing:
        held = (output > 1) & np.isfinite(tpot) & (tpot > p.overhead)
        if budget.expired():
            break
        if not held.any():
            continue
        span = np.zeros(len(p.output))
        span[np.flatnonzero(members)[held]] = tpot[held] * later[held]
        mu = own_multipliers(p, span)
        bracket = (p.token_terms(mu) - mu * span)[members]
        full.append(p.work_full[members] + np.where(held, bracket, 0.0))
        first.append(p.work_first[members])
    return np.array(full).reshape(-1, n), np.array(first).reshape(-1, n)
