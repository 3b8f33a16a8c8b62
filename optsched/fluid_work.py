r"""The fluid bound on mean latency with each request's whole least item work on the time grid.

The programme of :mod:`optsched.fluid_bounds` (``fluid-latency``) charges the engine's time per
interval through progress weights: request i's items cost at least :math:`\omega_i` per unit of
weight, so its time rows see :math:`\omega_i \sigma_i` of i's work. Under the weights' caps that is
less than i's least item work: a prompt's chunks weigh at most :math:`\bar s_i` each whatever their
terms, and a decode item reading many slots weighs :math:`\sqrt{\hat c}` for a term :math:`\hat c
\ge \omega_i \sqrt{\hat c}`. On the first 300 requests of splitwise_conv at 4 times the arrival rate
the time rows charge 15.8 s where every schedule's items take at least 18.9 s under the same terms
(``tests/benchmarks/bench_conv_load.py``), arrived within 21 s: the engine's load is what the
programme underprices. ``fluid-work`` adds the work itself, with the notation of
:mod:`optsched.fluid_bounds` (its cells, grid, :math:`\beta'`, :math:`\bar s_i`, :math:`p_{ik}`,
:math:`z_{ik}`, :math:`m_k`), proven for every schedule that replays cleanly from the facts
(F1)-(F4) of :mod:`optsched.bounds`.

**Least work.** Under the profile's own per-token term a (the tile is in :math:`\beta'`, one whole
tile a batch), every batch B lasts :math:`T_B \ge \beta' + \sum_{y \in B} \hat c_y` with
:math:`\hat c_y` the item's terms: :math:`L((a + p_a) c + p_q c^2 + p_x c m)` for a prefill chunk
of c tokens over m cached slots, :math:`L(a + d_a + d_k m)` for a decode item reading m slots (the
tiles beyond the first and the longest-context term are non-negative). By (F3) request i's items'
terms add up to at least

.. math:: w_i = L(a + p_a + p_q) I_i + E_i + \sum_{g=1}^{O_i - 1} \min\big(L(a + d_a + d_k (I_i + g - 1)),
          L(a + p_a + p_q)(I_i + g)\big),

with :math:`E_i` the least attention of the prompt's last pass from an empty KV beyond its linear
part (:func:`optsched.load_bounds.prompt_attention_extra`; a pass restarted after an eviction adds
more).

**The point a schedule gives.** Let :math:`\tilde x_{ik} = \sum_{B \ni i} \theta_{Bk} \hat c_{y(i,
B)}` be i's item terms split by time as the batches are (:math:`\theta_{Bk}` the part of B's
interval inside interval k), :math:`X_i = \sum_k \tilde x_{ik} \ge w_i`, and :math:`x_{ik} = \tilde
x_{ik} w_i / X_i \le \tilde x_{ik}`, so :math:`\sum_k x_{ik} = w_i`. Then:

- *work time* (F1): the batches in interval k take at most :math:`\Delta_k`, each at least
  :math:`\beta'` plus its items' terms, so :math:`\beta' m_k + \sum_i x_{ik} \le \Delta_k`;
- *own work*: i is in the system through its own batches, each at least :math:`\beta'` plus its
  own item's term, and they number at least :math:`p_{ik} / \bar s_i` inside k (the fluid bound's
  row of one item a batch), so :math:`z_{ik} \ge x_{ik} + (\beta' / \bar s_i) p_{ik}`;
- *work span*: spread each of i's item terms evenly over its batch: a density at most 1 (an item's
  term is at most its batch's time), of mass :math:`X_i`, zero before :math:`r_i` and after
  :math:`F_i`, with mass :math:`\tilde x_{ik}` in interval k, every point of which is at least
  :math:`\max(\tau_k, r_i)`. Mass X at density at most 1 ending by F lies on at least X of time, so
  :math:`\int (F_i - t) \rho \ge X_i^2 / 2` and :math:`X_i F_i \ge \sum_k \max(\tau_k, r_i) \tilde
  x_{ik} + X_i^2 / 2`; dividing by :math:`X_i` (:math:`\tilde x_{ik} / X_i = x_{ik} / w_i`),

  .. math:: \sum_k z_{ik} = F_i - r_i \ge \sum_k \frac{\max(\tau_k, r_i) - r_i}{w_i} x_{ik} + \frac{w_i}{2}.

Each of these holds at the point every schedule gives, next to the rows of ``fluid-latency``, so
the least :math:`\sum_{ik} z_{ik}` of the programme with them, over N, is a lower bound on the mean
latency, at least ``fluid-latency``'s on the same grid. A request whose work is done late is in the
system until then (the work span), and work cannot move to where the engine idles before its
request arrives (cells start at the interval holding :math:`r_i`).

**Scale.** The grid and cells of :func:`optsched.fluid_bounds.fluid_grid` plus one column a cell;
HiGHS solves it within :data:`WORK_TIME` seconds or it is not listed, lowered by
:data:`~optsched.fluid_bounds.FLUID_MARGIN` like ``fluid-latency``.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from .costmodel import Coefficients
from .fluid_bounds import FluidTerms, fluid_bound
from .instance import Instance
from .lprows import LpRows
from .result import Bound

__all__ = ["WORK_TIME", "fluid_work", "least_work", "work_rows"]

#: Time limit (seconds) of HiGHS' solve; a solve stopped by it gives no bound.
WORK_TIME = 20.0


def least_work(instance: Instance, attention: np.ndarray) -> np.ndarray:
    """w_i of the module docstring, request order (seconds): the prompt's linear terms and least
    attention ``attention`` (E_i, :func:`optsched.load_bounds.prompt_attention_extra`), then the
    cheaper of a decode and a re-prefill for every later token, under the profile's own per-token
    term (no tile share)."""
    coef = Coefficients.of(instance.cost_model)
    L, a, pa, pq = coef.layers, coef.per_token, coef.prefill_per_token, coef.prefill_per_token_sq
    da, dk = coef.decode_per_token, coef.decode_per_kv
    I = np.array([r.prompt_tokens for r in instance.requests], dtype=np.float64)
    O = np.array([r.output_tokens for r in instance.requests], dtype=np.int64)
    later = np.maximum(O - 1, 0)
    owner = np.repeat(np.arange(len(I)), later)
    g = np.arange(len(owner)) - np.repeat(np.cumsum(later) - later, later) + 1.0  # 1 .. O_i - 1
    held = I[owner] + g - 1.0
    token = np.minimum(L * (a + da + dk * held), L * (a + pa + pq) * (held + 1.0))
    prompt = L * (a + pa + pq) * I + attention
    work: np.ndarray = prompt + np.bincount(owner, token, minlength=len(I))
    return work


def work_rows(h: Any, rows: LpRows, cells: Any, terms: FluidTerms, tau: np.ndarray, work: np.ndarray) -> None:
    """The columns x_ik (one a cell of ``cells``) and the rows of the module docstring for least
    works ``work``: work time (interval k < G), sum_k x_ik = w_i, own work and work span."""
    import highspy

    n = len(cells.owner)
    x = h.getNumCol() + np.arange(n)
    h.addVars(n, np.zeros(n), np.full(n, highspy.kHighsInf))
    G, inner = cells.G, np.flatnonzero(cells.inner)
    first = rows.add(np.full(G, -np.inf), np.diff(tau))  # work time: beta' m_k + sum_i x_ik <= Delta_k
    rows.put(first + np.arange(G), cells.m, terms.overhead)
    rows.put(first + cells.k[inner], x[inner], 1.0)
    first = rows.add(work, work)  # sum_k x_ik = w_i
    rows.put(first + cells.owner, x, 1.0)
    every = np.arange(n)  # own work: z_ik - x_ik - (beta' / s_i) p_ik >= 0
    pos, cols, vals, const = cells.p_terms(every, -terms.overhead / terms.cap[cells.owner])
    first = rows.add(-const, np.full(n, np.inf))
    rows.put(first + pos, cols, vals)
    rows.put(first + every, cells.z, 1.0)
    rows.put(first + every, x, -1.0)
    lead = np.maximum(tau[cells.k] - terms.release[cells.owner], 0.0) / work[cells.owner]
    first = rows.add(work / 2.0, np.full(len(work), np.inf))  # work span: sum_k z_ik - sum_k lead x_ik >= w_i / 2
    rows.put(first + cells.owner, cells.z, 1.0)
    rows.put(first + cells.owner, x, -lead)


def fluid_work(instance: Instance, most: int, attention: np.ndarray, seconds: float = WORK_TIME) -> Bound | None:
    """The ``fluid-work`` bound of the module docstring (seconds, mean over requests), or None (too
    many requests for the grid, a degenerate profile, or not solved within ``seconds``). ``most``:
    the most items one batch holds (:func:`optsched.load_bounds.most_items`); ``attention``: each
    prompt's least attention beyond its linear terms (:func:`~optsched.load_bounds.prompt_attention_extra`)."""
    work = least_work(instance, attention)
    if not (work > 0).all():
        return None

    def describe(intervals: int) -> str:
        return (
            f"fluid-latency's LP over {intervals} intervals with each request's whole least item work on the "
            f"grid: the engine's time, its own batches and the span of its work (K = {most}; optsched/fluid_work.py)"
        )

    return fluid_bound(instance, most, seconds, "fluid-work", describe, partial(work_rows, work=work))
