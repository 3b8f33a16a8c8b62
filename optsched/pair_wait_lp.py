r"""``pair-wait-lp``: the ``pair-wait`` bound on mean latency with its waiting weights chosen by an LP.

``pair-wait`` (:mod:`optsched.pair_bounds`) charges request j, for each batch of its window that
does not hold it, a share :math:`v = \beta' \lambda_{ji}` of the batch overhead per partner i, and
holds for **any** weights :math:`\lambda_{ji} \ge 0` with :math:`\sum_i \lambda_{ji} \le 1` for
every j (the waited batches :math:`E_j` are at least every average of the :math:`e_{ij}`). It takes
:math:`\lambda_{ji} = 1 / \deg(j)`. Here the weights maximise the bound:

.. math:: \max_{\lambda \ge 0,\ \sum_i \lambda_{ji} \le 1}\ \sum_{\{i,j\}} \min\big(R_i(r_j) +
          S_j(\rho_i; \beta'\lambda_{ji}),\ w'_j + S_i(n_j; \beta'\lambda_{ij})\big).

Each :math:`S_k(u; v)` (:func:`optsched.pair_bounds` ``_share_cost``) is
:math:`\min(a_1 y_f + b_1 y_l,\ a_2 y_l + b_2 y_f) + c_3 y_o` with :math:`y_o = \min(c_{min} + v/2,
v)` (a waited or chunk-only batch), :math:`y_f = \min(c_{min} I_k, y_o)` (the first token's batch),
:math:`y_l = \min(d_k, y_o)` (a later token's) and non-negative counts :math:`a_1, b_1, a_2, b_2,
c_3` of the units u: a concave piecewise-linear function of v. So the problem is the linear
programme that keeps :math:`y_o, y_f, y_l` and the two inner sums as variables bounded above by
their pieces, and one variable per pair bounded above by both orders' totals; at its optimum every
variable equals its minimum. The programme only **chooses** the weights: the bound is
``pair-wait``'s closed form evaluated at them (:meth:`optsched.pair_bounds.WaitTerms.mean`), after
each request's weights are scaled to add up to at most 1, so HiGHS' tolerances cannot enter the
value, and it is never below ``pair-wait`` (whose uniform weights are a feasible point; the larger of
the two is returned).

Times in the programme are in milliseconds (its coefficients near 1). It is built when the pairs
number at most :data:`LP_PAIRS` and solved within :data:`LP_TIME` seconds; a solve stopped by the
limit still gives valid weights (any feasible point does), and no feasible point gives no bound.
"""

from __future__ import annotations

import numpy as np

from .bounds import critical_path_times
from .instance import Instance
from .lprows import LpRows
from .pair_bounds import WaitTerms, pair_counts, wait_terms
from .result import Bound

__all__ = ["LP_PAIRS", "LP_TIME", "pair_wait_lp", "wait_weights"]

#: Most request pairs the programme is built for (11 columns and 14 rows each).
LP_PAIRS = 40_000

#: Time limit (seconds) of the programme's solve.
LP_TIME = 10.0

#: Scale of the programme's times: milliseconds.
MS = 1e3

#: Variable blocks of one pair: a weight, y_o, y_f, y_l and the inner sum s for each order (i
#: finishing first uses j's weight, then j first uses i's), and the pair's value t.
BLOCKS = ("lam1", "yo1", "yf1", "yl1", "s1", "lam2", "yo2", "yf2", "yl2", "s2", "t")


def _counts(units: np.ndarray, outputs: np.ndarray) -> tuple[np.ndarray, ...]:
    """(a_1, b_1, a_2, b_2, c_3) of the module docstring: the units' split between the first token's
    batch, the later tokens' and the rest, in either order (as ``_share_cost`` of pair_bounds)."""
    n_later = np.maximum(outputs - 1.0, 0.0)
    a1 = np.minimum(units, 1.0)
    b1 = np.minimum(np.maximum(units - 1.0, 0.0), n_later)
    a2 = np.minimum(units, n_later)
    b2 = np.minimum(np.maximum(units - n_later, 0.0), 1.0)
    c3 = np.maximum(units - n_later - 1.0, 0.0)
    return a1, b1, a2, b2, c3


def _rows(rows: LpRows, upper: np.ndarray, *terms: tuple[np.ndarray, np.ndarray | float]) -> None:
    """One row per pair: ``sum coef * column <= upper`` for the (column, coef) ``terms``."""
    at = rows.add(np.full(len(upper), -np.inf), upper) + np.arange(len(upper))
    for cols, coef in terms:
        rows.put(at, cols, coef)


def _order_rows(rows: LpRows, col: dict[str, np.ndarray], k: str, terms: WaitTerms) -> None:
    """The rows of one order's S: y_o below c_min + v/2 and v, y_f and y_l below y_o."""
    n, beta, c = len(terms.pairs.i), terms.beta * MS, terms.c_min * MS
    zero = np.zeros(n)
    _rows(rows, np.full(n, c), (col[f"yo{k}"], 1.0), (col[f"lam{k}"], -beta / 2))  # y_o <= c_min + v/2
    _rows(rows, zero, (col[f"yo{k}"], 1.0), (col[f"lam{k}"], -beta))  # y_o <= v
    _rows(rows, zero, (col[f"yf{k}"], 1.0), (col[f"yo{k}"], -1.0))  # y_f <= y_o
    _rows(rows, zero, (col[f"yl{k}"], 1.0), (col[f"yo{k}"], -1.0))  # y_l <= y_o


def _sum_rows(rows: LpRows, col: dict[str, np.ndarray], k: str, units: np.ndarray, outputs: np.ndarray) -> np.ndarray:
    """s below both orders of the first and later tokens' batches; returns c_3 (the rest's count)."""
    a1, b1, a2, b2, c3 = _counts(units, outputs)
    zero = np.zeros(len(units))
    _rows(rows, zero, (col[f"s{k}"], 1.0), (col[f"yf{k}"], -a1), (col[f"yl{k}"], -b1))
    _rows(rows, zero, (col[f"s{k}"], 1.0), (col[f"yl{k}"], -a2), (col[f"yf{k}"], -b2))
    return c3


def wait_weights(terms: WaitTerms, seconds: float = LP_TIME) -> tuple[np.ndarray, np.ndarray] | None:
    """The weights (lam_j, lam_i) of the programme's best point found within ``seconds``, each
    request's adding up to at most 1; None without a feasible point."""
    import highspy  # the solver only when a bound is built (the command line starts without it)

    p = terms.pairs
    i, j, n = p.i, p.j, len(p.i)
    N = len(terms.outputs)
    col = {name: b * n + np.arange(n) for b, name in enumerate(BLOCKS)}
    upper = np.full(len(BLOCKS) * n, np.inf)
    upper[col["yf1"]], upper[col["yl1"]] = terms.c_min * terms.prompts[j] * MS, terms.decode[j] * MS
    upper[col["yf2"]], upper[col["yl2"]] = terms.c_min * terms.prompts[i] * MS, terms.decode[i] * MS
    rows = LpRows()
    _order_rows(rows, col, "1", terms)
    _order_rows(rows, col, "2", terms)
    c3_1 = _sum_rows(rows, col, "1", p.batches, terms.outputs[j])
    c3_2 = _sum_rows(rows, col, "2", terms.least_batches[j], terms.outputs[i])
    _rows(rows, p.rest * MS, (col["t"], 1.0), (col["s1"], -1.0), (col["yo1"], -c3_1))  # t <= R_i + S_j
    _rows(rows, terms.work[j] * MS, (col["t"], 1.0), (col["s2"], -1.0), (col["yo2"], -c3_2))  # t <= w'_j + S_i
    budget = rows.add(np.full(N, -np.inf), np.ones(N))  # each request's weights add up to at most 1
    rows.put(budget + np.concatenate([j, i]), np.concatenate([col["lam1"], col["lam2"]]), 1.0)
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", max(float(seconds), 0.01))
    h.addVars(len(upper), np.zeros(len(upper)), upper)
    h.changeColsCost(n, col["t"].astype(np.int32), np.full(n, -1.0))  # maximise sum t
    if rows.pass_to(h) != highspy.HighsStatus.kOk:
        return None
    h.run()
    if h.getInfo().primal_solution_status != 2:  # no feasible point
        return None
    x = np.asarray(h.getSolution().col_value)
    lam_j, lam_i = np.maximum(x[col["lam1"]], 0.0), np.maximum(x[col["lam2"]], 0.0)
    spent = np.bincount(np.concatenate([j, i]), weights=np.concatenate([lam_j, lam_i]), minlength=N)
    scale = 1.0 / np.maximum(spent, 1.0)  # the solver's tolerances: back to at most 1 a request
    return lam_j * scale[j], lam_i * scale[i]


def pair_wait_lp(instance: Instance, seconds: float = LP_TIME) -> Bound | None:
    """The ``pair-wait-lp`` bound on mean latency (seconds; module docstring), or None (no pairs, more
    than :data:`LP_PAIRS`, or no feasible point within ``seconds``)."""
    release = np.array([r.arrival for r in instance.requests], dtype=np.float64)
    A = critical_path_times(instance)
    counted = pair_counts(release, A)
    if not 0 < counted[1].sum() <= LP_PAIRS:
        return None  # the pairs are counted before their terms are built
    terms = wait_terms(instance, A, counted)
    weights = wait_weights(terms, seconds)
    if weights is None:
        return None
    value = max(terms.mean(*weights), terms.mean(*terms.uniform()))
    note = (
        f"pair-wait with each request's overhead weights over its {len(terms.pairs.i)} pairs chosen by an LP "
        "(optsched/pair_wait_lp.py)"
    )
    return Bound("pair-wait-lp", value, True, note)
