r"""Pricing the TPOT of requests that decode together: cost rows for the queueing windows of goodput.

The windows of :mod:`optsched.problems.infermax.goodput_bounds` charge each met request its least
work and a share of a batch count that does not depend on the SLOs. A TPOT target ties the two: a
request that meets TPOT :math:`\le \pi_i` has all its later tokens in batches lying inside its
decode span, of length at most :math:`\pi_i (O_i - 1)`, and a batch that serves many such requests
is long, since its time grows with the decode items it holds. This module turns that into more cost
rows :math:`c_i` for the same window inequality :math:`\sum_{i \in Q} c_i \le e - s`.

Batch time
----------
By (F0) and (F2) of :mod:`optsched.bounds` every batch j costs at least its linear form, and the
tile term :math:`L t_c \lceil N_j / t \rceil` is at least :math:`L t_c (\theta + (1 - \theta) N_j /
t)` for every :math:`\theta \in [0, 1]` (:math:`N_j \ge 1` and :math:`\lceil x \rceil \ge \max(1,
x)`). So with :math:`b_\theta = L(b + \theta t_c)` and per-token coefficient :math:`a_\theta = a +
(1 - \theta) t_c / t`, :math:`T_j \ge b_\theta + L\,pb [\text{prefill}] + L d_x K_j + S_j`, where
:math:`K_j` is the longest context a decode item of j reads (0 without decode items) and
:math:`S_j` the sum of the item terms of (F2) under :math:`a_\theta` of the items in j. Per
request, :math:`w_i` and :math:`w^1_i` are the least item work of (F3) under :math:`a_\theta`
(:func:`optsched.bounds.request_work` of the instance with that cost); token :math:`g + 1`,
:math:`g = 1..O_i - 1`, comes from a decode item reading :math:`h = I_i + g - 1` slots (item term
:math:`\delta^d_{ig}`) or from a re-prefill of :math:`I_i + g` tokens (item terms adding up to at
least :math:`\delta^r_{ig} = L (a_\theta + pa + pq)(I_i + g)`).

Proof
-----
Take an interval :math:`[s, e]`, the met requests Q of the window (:math:`a_i \ge s`,
:math:`f_i \le e`) and among them the set H of those with :math:`D_i \le e`, :math:`O_i \ge 2` and a
finite TPOT target :math:`\pi_i` (read with the slack of the windows). For :math:`i \in H` let
:math:`B_i` be the batches holding an item of i after its first token and by its last: they lie in
:math:`[F_i, C_i] \subseteq [s, e]`, are sequential (F1), and there are at least :math:`O_i - 1` of
them (one token per batch), so :math:`\sum_{j \in B_i} T_j \le C_i - F_i \le \pi_i (O_i - 1)`.
Summing over H, with :math:`m_j` the requests of H holding an item in batch j:
:math:`\sum_j m_j T_j \le \sum_H \pi_i (O_i - 1)`. Add :math:`\mu \ge 0` times this to the window's
time inequality :math:`\sum_j T_j \le e - s` (every batch with an item of Q lies in
:math:`[s, e]`):

.. math::

    \sum_j T_j + \mu \sum_j m_j T_j \le (e - s) + \mu \sum_H \pi_i (O_i - 1).

On the left, the item terms of the first sum give at least :math:`L\,pb\,\sum_Q I_i / P + \sum_Q
w_i` (whole work for :math:`D_i \le e`, first-token work otherwise, as in the windows). The rest is
at least, over the batches j with :math:`m_j \ge 1` and with :math:`\beta_j = b_\theta + L d_x K_j`
and :math:`\delta_x` the item term of H's item x in j,
:math:`\beta_j + \mu m_j \beta_j + \mu m_j \sum_x \delta_x = \sum_x (\beta_j / m_j + \mu m_j
\delta_x + \mu \beta_j) \ge \sum_x (2 \sqrt{\mu \beta_j \delta_x} + \mu \beta_j)` (AM-GM), which
grows with :math:`K_j`. A decode item reading h slots has :math:`K_j \ge h`; a prefill item
:math:`K_j \ge 0`. Group the items of i in :math:`B_i` by the token they lead to; by subadditivity
of :math:`\sqrt{\cdot}` a re-prefill group gives at least :math:`2 \sqrt{\mu b_\theta
\delta^r_{ig}} + \mu b_\theta` (chunks of an interrupted re-prefill only add). So every met set of
the window satisfies :math:`\sum_{Q} c_i \le e - s` with

.. math::

    c_i = w_i + L\,pb\,I_i / P + [i \in H] \Big( \sum_{g=1}^{O_i - 1} \min\big(
          2 \sqrt{\mu \beta_{ig} \delta^d_{ig}} + \mu \beta_{ig},\;
          2 \sqrt{\mu b_\theta \delta^r_{ig}} + \mu b_\theta \big) - \mu \pi_i (O_i - 1) \Big),
    \qquad \beta_{ig} = b_\theta + L d_x (I_i + g - 1).

This :math:`c_i` may be negative; the largest met count is still that of the cheapest requests
(sorted ascending, the running sums are convex from 0, so those at most :math:`e - s` form a prefix).
For one item cost :math:`\delta` and overhead :math:`\beta` the bracket is largest at :math:`\mu =
\beta \delta / (\pi - \beta)^2`, where it is :math:`\beta \delta (O_i - 1) / (\pi - \beta)`: the
fluid form of "an iteration lasts :math:`\beta / (1 - \rho)` at work utilisation :math:`\rho`, and
at most :math:`\pi`". :func:`tpot_rows` takes :math:`\mu` at that point for the quantiles
:data:`ITEM_QUANTILES` of the requests' mean decode item term and overhead, and :math:`\theta \in
\{0, 1\}` (only :math:`\theta = 0` without a tile term); every row is a valid bound, the windows take
the tightest.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ...bounds import request_work
from ...budget import NO_LIMIT, TimeBudget
from ...costmodel import Coefficients
from ...instance import Instance
from ...tokensums import add_by_owner, sum_of_runs, token_blocks

__all__ = ["ITEM_QUANTILES", "TpotPricing", "tpot_pricing", "tpot_rows"]

#: Quantiles of the requests' mean decode item term and overhead at which the multiplier mu is tuned.
ITEM_QUANTILES = (0.25, 0.5, 0.75)
_BLOCK = 1 << 20


@dataclass(frozen=True)
class TpotPricing:
    """What the rows of one tile weight :math:`\\theta` read (module docstring), request order.

    Attributes
    ----------
    overhead
        :math:`b_\\theta` (seconds per batch).
    per_slot
        :math:`L d_x` (seconds per slot of the longest decode context of a batch).
    coefficients
        :math:`(L, a_\\theta + pa + pq, a_\\theta + da, dk)`: the item terms of a re-prefill token and
        of a decode item.
    prompt, output
        :math:`I_i`, :math:`O_i`.
    work_full, work_first
        :math:`w_i + L pb I_i / P` and :math:`w^1_i + L pb I_i / P` (seconds).
    decode_items, decode_overheads
        Per request, the sums over its later tokens of the decode item terms and of the decode
        overheads :math:`\\beta_{ig}` (seconds; to tune mu).
    """

    overhead: float
    per_slot: float
    coefficients: tuple[float, float, float, float]
    prompt: np.ndarray
    output: np.ndarray
    work_full: np.ndarray
    work_first: np.ndarray
    decode_items: np.ndarray
    decode_overheads: np.ndarray

    def token_terms(self, mu: float | np.ndarray) -> np.ndarray:
        """Per request, the sum over its later tokens of the min(...) terms of :math:`c_i` at ``mu``
        (one multiplier, or one per request: :mod:`.tpot_own`)."""
        later = np.maximum(self.output - 1, 0)
        if not isinstance(mu, np.ndarray):  # a function of the slots h alone: running sums over h
            return sum_of_runs(self.prompt, later, lambda held: self._token_term(held, mu), _BLOCK)
        terms = np.zeros(len(later))
        for owners, owner, rank, _ in token_blocks(later, _BLOCK):
            add_by_owner(terms, owners, owner, self._token_term(self.prompt[owner] + rank, mu[owner]))
        return terms

    def _token_term(self, held: np.ndarray, mu: float | np.ndarray) -> np.ndarray:
        """The min(...) term of :math:`c_i` of a later token whose decode item reads ``held`` slots."""
        L, refill, decode, dk = self.coefficients
        held = held.astype(np.float64)
        item = L * (decode + dk * held)
        beta = self.overhead + self.per_slot * held
        by_decode = 2.0 * np.sqrt(mu * beta * item) + mu * beta
        by_refill = 2.0 * np.sqrt(mu * self.overhead * L * refill * (held + 1.0)) + mu * self.overhead
        return np.minimum(by_decode, by_refill)


def _affine_token_sums(constant: float, slope: float, I: np.ndarray, O: np.ndarray) -> np.ndarray:
    """Per request, :math:`\\sum_{g=1}^{O_i - 1} (\\text{constant} + \\text{slope}\\,(I_i + g - 1))` in
    closed form (the decode item terms and overheads of its later tokens)."""
    n = np.maximum(O - 1, 0).astype(np.float64)
    return constant * n + slope * (I * n + n * (n - 1.0) / 2.0)


def tpot_pricing(instance: Instance) -> tuple[TpotPricing, ...]:
    """:class:`TpotPricing` of ``instance`` for each tile weight (module docstring)."""
    cm = instance.cost_model
    twin = cm.linear_twin()
    tile = cm.per_tile / cm.token_tile if cm.per_tile else 0.0
    I = np.array([r.prompt_tokens for r in instance.requests], dtype=np.int64)
    O = np.array([r.output_tokens for r in instance.requests], dtype=np.int64)
    P = min(instance.limits.prefill_budget, instance.limits.token_budget)
    out = []
    for theta in (0.0, 1.0) if cm.per_tile else (0.0,):
        priced = replace(twin, per_token=cm.per_token + (1.0 - theta) * tile)
        at = replace(instance, cost_model=priced)
        c = Coefficients.of(priced.linear_twin())
        L = c.layers
        bias = L * c.prefill_bias * I / P
        overhead, per_slot, coefficients = (
            L * (c.base + theta * cm.per_tile),
            L * cm.decode.per_max_kv,
            (
                L,
                c.per_token + c.prefill_per_token + c.prefill_per_token_sq,
                c.per_token + c.decode_per_token,
                c.decode_per_kv,
            ),
        )
        items = _affine_token_sums(L * coefficients[2], L * coefficients[3], I, O)
        overheads = _affine_token_sums(overhead, per_slot, I, O)
        out.append(
            TpotPricing(
                overhead=overhead,
                per_slot=per_slot,
                coefficients=coefficients,
                prompt=I,
                output=O,
                work_full=request_work(at) + bias,
                work_first=request_work(at, first_tokens=True) + bias,
                decode_items=items,
                decode_overheads=overheads,
            )
        )
    return tuple(out)


def _multipliers(p: TpotPricing, held: np.ndarray, pi: float) -> list[float]:
    """mu at the quantiles :data:`ITEM_QUANTILES` of the mean decode item term and overhead of the
    requests ``held`` (module docstring), for the TPOT target ``pi``."""
    later = (p.output[held] - 1).astype(np.float64)
    delta = np.quantile(p.decode_items[held] / later, ITEM_QUANTILES)
    beta = np.quantile(p.decode_overheads[held] / later, ITEM_QUANTILES)
    return sorted({float(b * d / (pi - b) ** 2) for b, d in zip(beta, delta) if pi > b})


def tpot_rows(
    pricing: tuple[TpotPricing, ...],
    output: np.ndarray,
    tpot: np.ndarray,
    members: np.ndarray,
    budget: TimeBudget = NO_LIMIT,
) -> tuple[np.ndarray, np.ndarray]:
    """Cost rows (whole request, first token) for the windows, one per tile weight and multiplier,
    over the requests ``members`` (a mask) of outputs ``output`` and TPOT targets ``tpot`` (seconds,
    slack included, inf where none; both of the members only). No rows (shape (0, members)) when no
    member has a TPOT target above the overhead. No more rows are priced once ``budget`` has
    expired: each row is one choice of the windows' minimum, so fewer rows give a weaker bound,
    still proven."""
    later = np.maximum(output - 1, 0).astype(np.float64)
    full, first = [], []
    for p in pricing:
        held = (output > 1) & np.isfinite(tpot) & (tpot > p.overhead)
        if not held.any():
            continue
        mask = np.flatnonzero(members)[held]
        chosen = np.zeros(len(p.output), dtype=bool)
        chosen[mask] = True
        span = np.where(held, tpot, 0.0) * later
        for mu in _multipliers(p, chosen, float(np.median(tpot[held]))):
            if budget.expired():
                break
            terms = p.token_terms(mu)[members]
            full.append(p.work_full[members] + np.where(held, terms - mu * span, 0.0))
            first.append(p.work_first[members])
    n = len(output)
    return np.array(full).reshape(-1, n), np.array(first).reshape(-1, n)
