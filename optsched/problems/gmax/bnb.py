r"""The depth-first search of the branch-and-bound (:func:`.lagrange.branch_and_bound`) and its compiled
node expansion.

A node is a prefix of batches (prefix count n, prefix part :math:`T_A` of t, remaining requests R,
q positions filled, next start S); its bound is the Lagrangian bound of :mod:`.suffix`.

**Later incumbents.** When the search finds a schedule with a larger G the threshold rises to
:math:`\lambda > \lambda_0`; the bound is kept (no new programme) and adjusted: for every completion
:math:`n - \lambda t = (n - \lambda_0 t) - (\lambda - \lambda_0) t \le UB - (\lambda - \lambda_0)
T_{min}` with :math:`T_{min} = T_A + \sum_{j \in R} \min_b E_j(b)` (:math:`T_A` the prefix's part of t,
the sum of :mod:`.suffix` over its batches). A node is pruned when this is at most ``EPS`` (so an optimum is
proven up to ``EPS`` requests of :math:`n - \lambda t`, i.e. G up to ``EPS`` / t).

**Dominance.** Two nodes with the same remaining set R, starts :math:`S \le S'`, prefix counts
:math:`n \ge n'` and prefix times :math:`T \le T'`: every completion of the second is a completion of
the first at least as good for every :math:`\lambda \ge 0` (the completion's n part only falls with
a later start, its t part is the same), so the second is pruned. The first stays in the memo when a bound
then prunes it: all its completions are at most ``EPS``, so are the second's.

**Bound over the remaining requests.** At every node it expands, the search also computes the
programme over pseudo-schedules of the node's remaining requests R only,
:math:`V_h^R(q, g)` (:meth:`.suffix.SuffixBound.restricted`: members and leaders outside R excluded), and
prunes the node when :math:`A + \sum_{j \in R} \pi_j + V_h^R(q, \lfloor S / h \rfloor)`, adjusted as
above, is at most ``EPS``. Valid by the argument of :mod:`.suffix`: a real completion is a pseudo-schedule of
R with :math:`a_j = 1` on R, and the grid lemma holds for any step. :math:`V_h` alone lets the
suffix reuse the cheap requests the prefix has already served, which is most of its slack deep in
the tree; :math:`V_h^R` does not (N = 30 seed 3: 85,000 of 110,000 expanded nodes pruned by it). It
is computed on a coarse grid (``RESTRICTED_STEP``; any step is valid) by a compiled kernel.

**Swap rule.** A child batch B (size s, duration D) after the node's last batch :math:`B_k` (size
:math:`s_k`, duration :math:`D_k`, start :math:`S_k`) is not generated when :math:`D s_k < D_k s`
and every member of :math:`B_k` on time at :math:`S_k` is still on time at :math:`S_k + D`: the
prefix with B before :math:`B_k` has the same remaining set and next start, t smaller by
:math:`s D_k - s_k D` (the positions after both batches are the same; B's members wait
:math:`D_k` less, :math:`B_k`'s D more), and no fewer requests on time (x is non-increasing in the
start), so every completion of it is strictly better in t and no worse in n. The relation strictly
lowers t, so no two prefixes exclude each other (the comparison :math:`D s_k < D_k s` is made with
a relative margin of 1e-12 and the SLO test with ``SWAP_MARGIN``). Leaders are sorted by duration,
so the rule skips a prefix of each size's leaders whatever their other members.

The expansion of a node (:func:`node_children`) is compiled by numba at its first call and
cached on disk.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ...budget import NO_LIMIT, TimeBudget
from ...result import Status
from .problem import GmaxProblem, g_core, g_value
from .suffix import SuffixBound

__all__ = ["EPS", "RESTRICTED_STEP", "SWAP_MARGIN", "Search", "grid_cell", "node_children", "on_time_at"]

#: Pruning tolerance on n - lambda t (requests).
EPS = 1e-9

#: Grid step (seconds) of the bound over a node's remaining requests: at N = 30 steps of 0.05 to
#: 1 s prune the same nodes (85,258 to 86,315 on seed 3) and the cost falls with the cells.
RESTRICTED_STEP = 1.0

#: Seconds by which the swap rule keeps clear of an SLO (float rounding of starts).
SWAP_MARGIN = 1e-9

#: Nodes between two looks at the time budget.
CHECK_EVERY = 256
#: Children built between two looks at the time budget (a node near the root has tens of
#: thousands, about 6 microseconds each).
CHILDREN_CHECK_EVERY = 4096


class Search:
    """The depth-first search of :func:`.lagrange.branch_and_bound` (module docstring)."""

    def __init__(self, problem: GmaxProblem, suffix: SuffixBound, batches: list[list[int]], lam_hi: float):
        self.p, self.v, self.lam_hi = problem, suffix, lam_hi
        self.lam0 = suffix.lam
        n, t = g_core(problem, batches)
        self.best, self.lam = batches, n / t
        self.emin = problem.times.exec.min(axis=1)
        self.e2e_task = np.array(problem.e2e_task, dtype=bool)
        self.memo: dict[int, list[tuple[float, int, float]]] = {}
        self.nodes = 0
        self.swapped = 0
        self.restricted_pruned = 0
        self.remaining_bound = SuffixBound(problem, suffix.lam, RESTRICTED_STEP)
        self.remaining_bound.pi = suffix.pi
        t = problem.times
        self.tables = (
            np.stack(suffix.order).astype(np.int64),
            t.exec,
            t.prefill,
            self.e2e_task,
            problem.slo_e2e,
            problem.slo_ttft,
            t.tpot <= problem.slo_tpot[:, None],
            suffix.pi,
            self.emin,
            np.asarray(problem.need, dtype=float),
            math.inf if problem.capacity is None else float(problem.capacity),
        )

    def dominated(self, rest: int, start: float, n: int, t: float) -> bool:
        entries = self.memo.setdefault(rest, [])
        lo, hi = self.lam, self.lam_hi
        for s2, n2, t2 in entries:
            if s2 <= start and n2 - n >= lo * (t2 - t) and n2 - n >= hi * (t2 - t):
                return True
        entries.append((start, n, t))
        return False

    def children(self, node: tuple, member: np.ndarray, budget: TimeBudget = NO_LIMIT) -> list[tuple] | None:
        """The children of a node whose adjusted bound exceeds EPS, as nodes (bound, tmin, ...);
        ``member``: :meth:`member` of the node's remaining requests. None when ``budget`` expires
        while they are built (a node near the root has tens of thousands: half a second)."""
        _, _, rest, q, start, n_acc, t_acc, pisum, emin_sum, sched, last_start = node
        last = np.full(self.p.max_batch_size, -1, dtype=np.int64)
        if sched is not None:
            last[: len(sched[0])] = sched[0]
        members, sizes, fields = node_children(  # scalars cast: one compiled signature
            self.tables,
            self.v.value,
            float(self.v.step),
            member,
            last,
            float(last_start),
            int(q),
            float(start),
            float(n_acc),
            float(t_acc),
            float(pisum),
            float(emin_sum),
            float(self.lam0),
            float(self.lam - self.lam0),
        )
        self.swapped += int(fields[-1, 0])
        out: list[tuple] = []
        for batch, size, (ub, tmin, child_start, child_n, child_t, child_pi, child_emin) in zip(
            members.tolist(), sizes.tolist(), fields[:-1].tolist()
        ):
            if len(out) % CHILDREN_CHECK_EVERY == CHILDREN_CHECK_EVERY - 1 and budget.expired():
                return None
            batch = batch[:size]
            mask = sum(1 << j for j in batch)
            out.append((
                ub,
                tmin,
                rest & ~mask,
                q + size,
                child_start,
                child_n,
                child_t,
                child_pi,
                child_emin,
                (batch, sched),
                start,
            ))
        return out

    def member(self, rest: int) -> np.ndarray:
        """0/1 per request: whether it is in the bit mask ``rest``."""
        nreq = self.p.n_requests
        return np.unpackbits(np.frombuffer(rest.to_bytes(nreq // 8 + 1, "little"), np.uint8), bitorder="little")[:nreq]

    def adjusted(self, node: tuple) -> float:
        return node[0] - (self.lam - self.lam0) * node[1]

    def leaf(self, sched) -> None:
        batches = []
        while sched is not None:
            batches.append(sched[0])
            sched = sched[1]
        batches.reverse()
        n, t = g_core(self.p, batches)
        if g_value(n, t) > self.lam * (1 + 1e-12):
            self.best, self.lam = batches, n / t

    def run(self, budget: TimeBudget) -> tuple[Status, list[tuple]]:
        p = self.p
        full = (1 << p.n_requests) - 1
        root_ub = float(self.v.pi.sum() + self.v.value[0, 0])
        stack = [
            (
                root_ub,
                float(self.emin.sum()),
                full,
                0,
                0.0,
                0,
                0.0,
                float(self.v.pi.sum()),
                float(self.emin.sum()),
                None,
                0.0,
            )
        ]
        while stack:
            if self.nodes % CHECK_EVERY == 0 and budget.expired():
                return Status.TIME_LIMIT, stack
            node = stack.pop()
            self.nodes += 1
            if self.adjusted(node) <= EPS:
                continue
            rest = node[2]
            if rest == 0:
                self.leaf(node[9])
                continue
            if self.dominated(rest, node[4], node[5], node[6]):
                continue
            member = self.member(rest)
            ub = node[5] - self.lam0 * node[6] + node[7] + self.remaining_bound.restricted(member, node[3], node[4])
            if ub - (self.lam - self.lam0) * node[1] <= EPS:  # the bound over the remaining requests
                self.restricted_pruned += 1
                continue
            kids = self.children(node, member, budget)
            if kids is None:  # the node stays open: its bound covers the children not built
                stack.append(node)
                return Status.TIME_LIMIT, stack
            kids.sort(key=lambda k: k[0] - (self.lam - self.lam0) * k[1])
            stack.extend(kids)
        return Status.OPTIMAL, []


@njit(cache=True)
def on_time_at(tables, j, start, s):  # pragma: no cover - compiled
    """:func:`.suffix.on_time` (the same comparisons) from the search's tables."""
    _, exec_, prefill, e2e, slo_e2e, slo_ttft, tpot_ok, _, _, _, _ = tables
    if e2e[j]:
        return start + exec_[j, s - 1] <= slo_e2e[j]
    return start + prefill[j, s - 1] <= slo_ttft[j] and tpot_ok[j, s - 1]


@njit(cache=True)
def grid_cell(start, step, cells):  # pragma: no cover - compiled
    """:meth:`SuffixBound.cell` (the same arithmetic)."""
    return min(max(int(np.floor(start / step * (1 - 1e-12))), 0), cells - 1)


@njit(cache=True)
def node_children(
    tables, value, step, member, last, last_start, q, start, n_acc, t_acc, pisum, emin_sum, lam0, delta
):  # pragma: no cover - compiled
    """The children of a node (``Search.children``): per batch size s, the remaining rows in size
    order, their member values u, and every batch of a leader and s - 1 rows before it whose bound
    exceeds EPS and which fits the capacity. The s - 1 rows are enumerated in lexicographic order of
    the predecessors sorted by (-u, request), a level stopping at the first head whose sum with the
    next rows cannot beat what is left of the threshold (later heads are no larger); leaders that
    the swap rule settles are skipped. Returns (members padded
    with -1, sizes, rows of (bound, tmin, start, n, t, pisum, emin_sum)) plus a last row whose first
    field counts the skipped leaders."""
    nreq, bmax = tables[1].shape
    sk, dk, delay = _swap_rule(tables, last, last_start)
    left_total = 0
    for j in range(nreq):
        left_total += member[j]
    members = np.full((16, bmax), -1, np.int64)
    sizes = np.empty(16, np.int64)
    fields = np.empty((17, 7))
    count = 0
    skipped = 0
    idx = np.empty(nreq, np.int64)
    u = np.empty(nreq)
    gain = np.empty(nreq)
    fixed = np.empty(nreq)
    tail = np.empty(nreq)
    dur = np.empty(nreq)
    preds = np.empty(nreq, np.int64)
    pos = np.empty(bmax, np.int64)
    rem = np.empty(bmax + 1)
    node = (q, start, n_acc, t_acc, pisum, emin_sum, lam0, delta)
    for s in range(1, min(bmax, left_total) + 1):
        m = _size_rows(tables, value, step, member, node, s, idx, dur, gain, u, tail, fixed)
        first = 0
        if sk > 0:  # leaders (sorted by duration) shorter than s dk / sk and within the delay
            limit = dk / sk * s * (1 - 1e-12)
            while first < m and dur[first] < limit and dur[first] <= delay:
                first += 1
        skipped += first
        k = s - 1
        npred = 0
        for li in range(m):
            if li >= first and li >= k:
                depth = 0
                pos[0] = 0
                rem[0] = EPS - fixed[li]
                while depth >= 0:
                    at = pos[depth]
                    need_left = k - depth
                    ok = at <= npred - need_left
                    head = 0.0
                    if ok and need_left == 0:
                        ok = rem[depth] < 0
                    elif ok:
                        head = u[preds[at]]
                        rest_sum = 0.0
                        for r in range(at + 1, at + need_left):
                            rest_sum += u[preds[r]]
                        ok = head + rest_sum > rem[depth]
                    if not ok:  # later heads are no larger
                        depth -= 1
                        if depth >= 0:
                            pos[depth] += 1
                        continue
                    if need_left <= 1:  # a batch: the leader and the rows chosen so far (and this head)
                        members, sizes, fields, count = _add_child(
                            tables, node, s, li, pos, preds, idx, gain, dur, tail, members, sizes, fields, count
                        )
                        if need_left == 0:
                            depth = -1  # the size-1 batch is the only one
                        else:
                            pos[depth] += 1
                    else:
                        rem[depth + 1] = rem[depth] - head
                        pos[depth + 1] = at + 1
                        depth += 1
            at = npred  # insert li into the predecessors, sorted by (-u, request)
            while at > 0 and (u[preds[at - 1]] < u[li] or (u[preds[at - 1]] == u[li] and idx[preds[at - 1]] > idx[li])):
                preds[at] = preds[at - 1]
                at -= 1
            preds[at] = li
            npred += 1
    fields[count, 0] = skipped
    return members[:count], sizes[:count], fields[: count + 1]


@njit(cache=True)
def _swap_rule(tables, last, last_start):  # pragma: no cover - compiled
    """The swap rule's data of the node's last batch (``last``, padded with -1, started at
    ``last_start``): its size sk, its duration dk, and the largest delay of its start that keeps on
    time every member on time at ``last_start`` (less ``SWAP_MARGIN``; module docstring)."""
    _, exec_, prefill, e2e, slo_e2e, slo_ttft, _, _, _, _, _ = tables
    sk = 0
    dk = 0.0
    delay = np.inf
    for j in last:
        if j >= 0:
            sk += 1
    for j in last:
        if j >= 0:
            dk = max(dk, exec_[j, sk - 1])
            if on_time_at(tables, j, last_start, sk):
                if e2e[j]:
                    own, slo = exec_[j, sk - 1], slo_e2e[j]
                else:
                    own, slo = prefill[j, sk - 1], slo_ttft[j]
                delay = min(delay, (slo - own - last_start) - SWAP_MARGIN)
    return sk, dk, delay


@njit(cache=True)
def _size_rows(tables, value, step, member, node, s, idx, dur, gain, u, tail, fixed):  # pragma: no cover - compiled
    """The node's remaining requests in the order of size s (``node`` = (q, start, n, t, pisum,
    emin_sum, lam0, delta)): into the arrays, per row, the request, its duration, whether it is on
    time at the node's start, its member value u, the programme's value after a batch it leads
    (``tail``) and the bound of that batch without its other members (``fixed``). Returns the
    number of rows."""
    order, exec_, _, _, _, _, _, pi, emin, _, _ = tables
    q, start, n_acc, t_acc, pisum, emin_sum, lam0, delta = node
    nreq = exec_.shape[0]
    cells = value.shape[1]
    col = s - 1
    after = nreq - q - s
    m = 0
    for row in range(nreq):
        j = order[col, row]
        if member[j]:
            idx[m] = j
            dur[m] = exec_[j, col]
            gain[m] = 1.0 if on_time_at(tables, j, start, s) else 0.0
            u[m] = gain[m] - lam0 * dur[m] - pi[j] - delta * (dur[m] - emin[j])
            tail[m] = value[q + s, grid_cell(start + dur[m], step, cells)]
            fixed[m] = (
                n_acc
                - lam0 * t_acc
                + pisum
                + u[m]
                - lam0 * after * dur[m]
                + tail[m]
                - delta * (t_acc + after * dur[m] + emin_sum)
            )
            m += 1
    return m


@njit(cache=True)
def _add_child(
    tables, node, s, li, pos, preds, idx, gain, dur, tail, members, sizes, fields, count
):  # pragma: no cover - compiled
    """The batch of the leader row ``li`` and the rows ``preds[pos[:s - 1]]`` as the child at
    ``count`` when it fits the capacity (the arrays doubled when full): the arrays and the count."""
    _, exec_, _, _, _, _, _, pi, emin, need, capacity = tables
    q, start, n_acc, t_acc, pisum, emin_sum, lam0, _ = node
    nreq, bmax = exec_.shape
    k = s - 1
    after = nreq - q - s
    total = need[idx[li]]
    for d in range(k):
        total += need[idx[preds[pos[d]]]]
    if total > capacity:
        return members, sizes, fields, count
    cap = sizes.shape[0]
    if count == cap:
        cap *= 2
        members = np.concatenate((members, np.full((cap - count, bmax), -1, np.int64)))
        sizes = np.concatenate((sizes, np.empty(cap - count, np.int64)))
        fields = np.concatenate((fields, np.empty((cap - count, 7))))
    members[count, 0] = idx[li]
    won = gain[li]
    time_sum = dur[li]
    emin_used = emin[idx[li]]
    pi_used = pi[idx[li]]
    for d in range(k):
        r = preds[pos[d]]
        members[count, d + 1] = idx[r]
        won += gain[r]
        time_sum += dur[r]
        emin_used += emin[idx[r]]
        pi_used += pi[idx[r]]
    child_n = n_acc + won
    child_t = t_acc + time_sum + after * dur[li]
    child_pi = pisum - pi_used
    child_emin = emin_sum - emin_used
    sizes[count] = s
    fields[count, 0] = child_n - lam0 * child_t + child_pi + tail[li]
    fields[count, 1] = child_t + child_emin
    fields[count, 2] = start + dur[li]
    fields[count, 3] = child_n
    fields[count, 4] = child_t
    fields[count, 5] = child_pi
    fields[count, 6] = child_emin
    return members, sizes, fields, count + 1
