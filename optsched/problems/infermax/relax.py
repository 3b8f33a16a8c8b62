r"""Residency relaxation of the InferMax model: a proven makespan bound that sees requests take turns.

The work bound of :mod:`optsched.bounds` counts batches token by token (every token's batch holds its
:math:`I_i + k - 1` KV). What it cannot see is *residency*: a request holds its KV in every batch
from the one that completes its (re)fill until it finishes or is evicted, also in batches where it
is idle, and its KV only grows; new requests (and evicted ones) can only enter in a batch with
prefill tokens. When memory binds, this is what fixes the number of batches and of prefill
batches. This module solves, with CP-SAT, a relaxation that keeps exactly that and drops the token
detail. Its proven lower bound (CP-SAT's objective bound, valid at any time limit) plus the least
token work :math:`W` is a lower bound on the makespan.

Relaxation (batches :math:`j = 1..J`, requests i; notation of :mod:`.model`)
--------------------------------------------------------------------------
Variables: :math:`x_{ij}` request i generates a token in batch j; :math:`s_{ij}` that token ends a
(re)fill (a prefill item that completes the prompt); :math:`r_{ij}` request i is *resident* in j
(it generates there, or holds its KV in decode phase); :math:`G_{ij} = \sum_{j' \le j} x_{ij'}`;
:math:`H_{ij}` its KV counted in j; per batch :math:`y_j` (has items), :math:`p_j` (has prefill
tokens), :math:`d_j` (has decode items); :math:`z_{ij}` (a refill: :math:`s_{ij}` and
:math:`G_{i,j-1} \ge 1`) and its extra cost :math:`\rho_{ij}`.

- X1 :math:`G_{iJ} = O_i`; :math:`x_{ij} \Rightarrow r_{ij}`; :math:`s_{ij} \Rightarrow x_{ij}`.
- X2 residency starts only with a (re)fill: :math:`r_{ij} \Rightarrow r_{i,j-1} \vee s_{ij}`
  (:math:`r_{i1} \Rightarrow s_{i1}`); no residency after the last token:
  :math:`r_{ij} \Rightarrow G_{i,j-1} \le O_i - 1`.
- X3 memory: :math:`r_{ij} \Rightarrow H_{ij} \ge I_i + G_{ij} - 1`, else :math:`H_{ij} = 0`;
  :math:`\sum_i H_{ij} \le M`; running requests :math:`\sum_i r_{ij} \le R_{max}`; tokens
  :math:`\sum_i x_{ij} \le C`; per request :math:`\sum_j H_{ij} \ge A_i` (model row R6).
- X4 batch kinds: :math:`s_{ij} \Rightarrow p_j`; :math:`x_{ij} \wedge \neg s_{ij} \Rightarrow d_j`;
  :math:`p_j, d_j, r_{ij} \Rightarrow y_j`; :math:`y_j \Rightarrow p_j \vee d_j`;
  :math:`y_j \ge y_{j+1}`; :math:`\sum_j y_j \ge B`, :math:`\sum_j p_j \ge B_p` (the least counts of
  :func:`optsched.bounds.batch_counts`); identical requests finish in index order.
- X5 refills: :math:`z_{ij} \Leftarrow s_{ij} \wedge G_{i,j-1} \ge 1`,
  :math:`\rho_{ij} \ge z_{ij}\, \rho_i(G_{ij})` with
  :math:`\rho_i(k) = \max(0, (I_i + k - 1) q - (k_t + k_{dt} + k_{dk}(I_i + k - 2)))` (linear in k
  inside the max; :math:`q = k_t + k_{pt} + k_{pq}`).

Objective: :math:`\sum_j (k_b y_j + k_{pb} p_j + k_{db} d_j) + \sum_{ij} \rho_{ij}`; the bound is
:math:`W + ` (CP-SAT's proven bound on it), :math:`W = \sum_i W_i` of :func:`optsched.bounds.request_work`.

Proof that it is a lower bound
------------------------------
Take any schedule that replays cleanly with at most J batches with items (for the makespan
objective the proven horizon J of :func:`.data.horizon` admits an optimal schedule). Drop its
eviction-only batches and number the others :math:`j = 1..J'`, :math:`J' \le J` (pad with empty
batches). Set :math:`x_{ij}` = i generates a token in j, :math:`s_{ij}` = that token comes from a
prefill item, :math:`r_{ij}` = i generates in j or enters j in decode phase holding KV and not
evicted, :math:`y, p, d` = the batch has items, prefill tokens, decode items, :math:`H_{ij}` =
:math:`I_i + G_{ij} - 1` if :math:`r_{ij}` else 0. Then X1 holds (the contract's end state). X2:
a resident that does not complete a (re)fill in j is in decode phase holding KV at the start of j;
KV changes only by processing and evictions, so it held that KV (or completed its prompt) in the
previous batch with items, and in the first batch nobody holds KV; a finished request holds none.
X3: a request generating in j holds :math:`\hat m = I_i + G_{i,j-1} = I_i + G_{ij} - 1` after
processing (model C1), an idle decode-phase resident holds :math:`I_i + G_{ij} - 1`, and the
contract checks :math:`\sum_i \hat m \le M` and the running count there; each generating item has at least
one token; R6 holds as in the model. X4: a completing (re)fill is a prefill item with at least one
prefill token, a token not from a prefill item is a decode item, a batch with items has prefill
tokens or decode items, and the counts hold for every schedule (:mod:`optsched.bounds`). Identical
requests can be renamed so that they finish in index order (whole histories swap). X5 and the
cost: batch times add up to at most the makespan; each batch pays :math:`k_b` and its phase
biases; request i's tokens cost at least :math:`I_i q` for its first fill (:math:`c^2 \ge c` for
integer chunks), :math:`k_t + k_{dt} + k_{dk}(I_i + k - 2)` for a decode of token k, and at least
:math:`(I_i + k - 1) q` for a refill ending with token k (it re-processes the prompt and the
:math:`k - 1` tokens generated), which is :math:`W_i`'s share of that token plus at least
:math:`\rho_i(k)`; wasted partial fills cost :math:`\ge 0`. So the relaxation's value at this point
is at most the makespan, and its minimum (hence any proven bound on it) plus :math:`W` is at most
the optimum.

CP-SAT needs integers: every coefficient is scaled to picoseconds and rounded *down*, so the scaled
objective never exceeds the true one; the bound is divided back.

Also here: :func:`count_bound` (least batch counts proven by infeasibility of the relaxation with
count rows, :func:`count_check`, and the bound they give), :func:`add_count_fact` (such a fact as
rows of a CP-SAT model: this relaxation's checks and the InferMax model of :mod:`.cpsat`),
and :func:`schedule_from_point` (a relaxation point as a schedule, a candidate for the solve).
:mod:`.residency` combines them with the exact search of :mod:`.search`, as the solve uses them.
"""

from __future__ import annotations

import math
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

from ortools.sat.python import cp_model

from ...bounds import batch_counts, request_work
from ...budget import NO_LIMIT, TimeBudget
from ...costmodel import Coefficients
from ...cpsat_solver import CpSatRun, run_model
from ...deadline import DeadlinePassed
from ...instance import Instance
from ...result import Status
from ...schedule import Batch, Item, Schedule
from .model import linear_instance, symmetric_pairs

__all__ = [
    "CountResult",
    "RelaxationResult",
    "add_count_fact",
    "count_bound",
    "count_check",
    "count_cost",
    "UNBOUNDED",
    "UNIT",
    "floor_units",
    "refill_line",
    "relaxation_bound",
    "schedule_from_point",
]

#: Time unit of the relaxation's integer objective (seconds): picoseconds, coefficients rounded down.
UNIT = 1e-12

#: An integer cost above every path's (in :data:`UNIT` s): no path, or none known.
UNBOUNDED = (1 << 62) - 1


@dataclass(frozen=True, kw_only=True)
class RelaxationResult:
    """Outcome of :func:`relaxation_bound`.

    Attributes
    ----------
    bound
        Proven lower bound (seconds) on the makespan of every schedule with at most J batches with
        items (``math.inf`` when the relaxation proves there is none).
    value
        Value (seconds, ``W`` included) of the best relaxation solution found, None without one.
    status
        ``OPTIMAL`` (the relaxation solved), ``FEASIBLE`` (a point, the bound not closed),
        ``INFEASIBLE`` (no schedule within J batches), ``UNKNOWN`` (neither) or ``TIME_LIMIT`` (the
        model not built in time: the bound is the token work W).
    cpu
        Process CPU seconds spent in the solve.
    facts
        Count facts of :func:`count_bound` when it ran (else empty).
    schedule
        The best relaxation point turned into a schedule (:func:`schedule_from_point`), None without
        a point; it may violate the limits the relaxation drops (P, chunk sizes): replay judges it.
    """

    bound: float
    value: float | None
    status: Status
    cpu: float
    facts: tuple[tuple[int, int], ...] = ()
    schedule: Schedule | None = None


def floor_units(seconds: float) -> int:
    """``seconds`` in :data:`UNIT` s, rounded down (so an objective in these units never exceeds the true one)."""
    return math.floor(seconds / UNIT)


def refill_line(k: Coefficients, I: int) -> tuple[int, int]:
    """(a, b) with :math:`\\rho_i(g) = \\max(0, a + b g)` (X5, integer picoseconds rounded down): the
    refill of token g of a request of prompt I beyond the decode that W counts."""
    q = k.per_token + k.prefill_per_token + k.prefill_per_token_sq
    return floor_units((I - 1) * q - (k.per_token + k.decode_per_token + k.decode_per_kv * (I - 2))), floor_units(
        q - k.decode_per_kv
    )


class RelaxationModel:
    """The CP-SAT model of the module docstring (names as there); ``symmetry=False`` drops the
    finishing order of identical requests (to check that a given schedule is a point)."""

    def __init__(self, instance: Instance, J: int, symmetry: bool = True, budget: TimeBudget = NO_LIMIT) -> None:
        instance = linear_instance(instance)  # the costs every bound reads (model docstring)
        self.k = k = Coefficients.of(instance.cost_model).folded()
        reqs = list(instance.requests)
        lim = instance.limits
        N = len(reqs)
        self.m = mdl = cp_model.CpModel()
        self.x, self.s, self.r, self.G, self.H = [], [], [], [], []
        for i, req in enumerate(reqs):  # one request's row at a time: the budget is checked between them
            budget.check("residency relaxation")
            self.x.append([mdl.NewBoolVar(f"x_{i}_{j}") for j in range(J)])
            self.s.append([mdl.NewBoolVar(f"s_{i}_{j}") for j in range(J)])
            self.r.append([mdl.NewBoolVar(f"r_{i}_{j}") for j in range(J)])
            self.G.append([mdl.NewIntVar(0, req.output_tokens, f"G_{i}_{j}") for j in range(J)])
            self.H.append([mdl.NewIntVar(0, req.max_kv, f"H_{i}_{j}") for j in range(J)])
        self.y = [mdl.NewBoolVar(f"y_{j}") for j in range(J)]
        self.p = [mdl.NewBoolVar(f"p_{j}") for j in range(J)]
        self.d = [mdl.NewBoolVar(f"d_{j}") for j in range(J)]
        refills: list[cp_model.IntVar] = []
        for i, req in enumerate(reqs):
            budget.check("residency relaxation")
            I, O = req.prompt_tokens, req.output_tokens
            a, b = refill_line(k, I)
            big = max(0, a, a + b * O)  # the largest value of a + b k over k = 0..O
            for j in range(J):
                x, s, r, G, H = self.x[i][j], self.s[i][j], self.r[i][j], self.G[i][j], self.H[i][j]
                G_prev = self.G[i][j - 1] if j else 0
                mdl.Add(G == G_prev + x)  # X1
                mdl.AddImplication(x, r)
                mdl.AddImplication(s, x)
                if j:  # X2
                    mdl.AddBoolOr([self.r[i][j - 1], s]).OnlyEnforceIf(r)
                else:
                    mdl.AddImplication(r, s)
                mdl.Add(G_prev <= O - 1).OnlyEnforceIf(r)
                mdl.Add(H >= I + G - 1).OnlyEnforceIf(r)  # X3
                mdl.Add(H == 0).OnlyEnforceIf(r.Not())
                mdl.AddImplication(s, self.p[j])  # X4
                mdl.AddBoolOr([s, x.Not(), self.d[j]])
                mdl.AddImplication(r, self.y[j])
                if j and big > 0:  # X5: refills
                    z, had = mdl.NewBoolVar(f"z_{i}_{j}"), mdl.NewBoolVar(f"had_{i}_{j}")
                    mdl.Add(G_prev >= 1).OnlyEnforceIf(had)
                    mdl.Add(G_prev == 0).OnlyEnforceIf(had.Not())
                    mdl.AddBoolOr([s.Not(), had.Not(), z])
                    rho = mdl.NewIntVar(0, big, f"rho_{i}_{j}")
                    mdl.Add(rho >= a + b * G - big * (1 - z))
                    refills.append(rho)
            mdl.Add(self.G[i][J - 1] == O)
            mdl.Add(sum(self.H[i]) >= O * I + O * (O - 1) // 2)  # R6
        for j in range(J):
            if j % 256 == 0:
                budget.check("residency relaxation")
            mdl.Add(sum(self.x[i][j] for i in range(N)) <= lim.token_budget)
            if lim.kv_capacity is not None:
                mdl.Add(sum(self.H[i][j] for i in range(N)) <= lim.kv_capacity)
            if lim.max_running is not None and lim.max_running < N:
                mdl.Add(sum(self.r[i][j] for i in range(N)) <= lim.max_running)
            mdl.AddImplication(self.p[j], self.y[j])
            mdl.AddImplication(self.d[j], self.y[j])
            mdl.AddBoolOr([self.p[j], self.d[j]]).OnlyEnforceIf(self.y[j])
            if j + 1 < J:
                mdl.AddImplication(self.y[j + 1], self.y[j])
        b_min, bp_min = batch_counts(instance)
        mdl.Add(sum(self.y) >= min(b_min, J))
        mdl.Add(sum(self.p) >= min(bp_min, J))
        for a_, b_ in symmetric_pairs(instance) if symmetry else ():  # identical requests finish in index order
            O = reqs[a_].output_tokens
            for j in range(J):
                done_a = mdl.NewBoolVar(f"done_{a_}_{j}")
                mdl.Add(self.G[a_][j] >= O).OnlyEnforceIf(done_a)
                mdl.Add(self.G[a_][j] <= O - 1).OnlyEnforceIf(done_a.Not())
                mdl.Add(self.G[b_][j] <= O - 1).OnlyEnforceIf(done_a.Not())
        self.objective = sum(
            floor_units(k.base) * self.y[j]
            + floor_units(k.prefill_bias) * self.p[j]
            + floor_units(k.decode_bias) * self.d[j]
            for j in range(J)
        ) + sum(refills)
        mdl.Minimize(self.objective)
        self.work = math.fsum(request_work(instance))


#: CP-SAT workers of the relaxation, in order. With lb_tree_search the bound of scale N = 4 seed 0
#: reaches 84.73 ms in 30 s (objective_lb_search 83.38 ms, the default pair 64.39 ms); listed
#: second, it also keeps the small instances fast (N = 3 seed 2 optimal in 4.1 s, 30 s undecided
#: when listed first).
SUBSOLVERS = ("default_lp", "lb_tree_search", "max_lp", "core", "reduced_costs", "pseudo_costs", "quick_restart")


def _solve(model: cp_model.CpModel, budget: TimeBudget, threads: int | None, log: bool) -> CpSatRun:
    workers = threads or 2
    subsolvers = SUBSOLVERS[:workers] if workers >= 2 else ()
    return run_model(model, budget=budget, workers=workers, subsolvers=subsolvers, log=log)


#: Seconds per count check of :func:`count_bound` without a time limit, and the least with one.
CHECK_LIMIT = 10.0


def relaxation_bound(
    instance: Instance, J: int, budget: TimeBudget = NO_LIMIT, threads: int | None = None, log: bool = False
) -> RelaxationResult:
    """Solve the residency relaxation over ``J`` batches with CP-SAT (module docstring).

    Parameters
    ----------
    instance
        The instance (arrivals are ignored: they only add waiting time).
    J
        Batches with items of the schedules considered: the bound holds for every schedule with at
        most J of them (for the makespan optimum, a proven horizon of :func:`.data.horizon`).
    budget, threads, log
        CP-SAT controls (the bound is valid at any time limit); the budget covers building the
        model: one not built in time gives the token work W as the bound, status ``TIME_LIMIT``.
    """
    cpu = time.process_time()
    instance = linear_instance(instance)
    try:
        relax = RelaxationModel(instance, J, budget=budget)
    except DeadlinePassed:
        return RelaxationResult(
            bound=math.fsum(request_work(instance)), value=None, status=Status.TIME_LIMIT, cpu=time.process_time() - cpu
        )
    run = _solve(relax.m, budget, threads, log)
    if run.status == Status.INFEASIBLE:
        return RelaxationResult(bound=math.inf, value=None, status=Status.INFEASIBLE, cpu=time.process_time() - cpu)
    if run.status == Status.ERROR:
        raise RuntimeError(f"residency relaxation: invalid CP-SAT model ({relax.m.Validate()})")
    value = sched = None
    if run.found:
        value = relax.work + run.objective * UNIT
        point = [[[run.value(v) for v in row] for row in var] for var in (relax.x, relax.s, relax.r)]
        sched = schedule_from_point(instance, *point)
    bound = relax.work + run.bound * UNIT
    return RelaxationResult(bound=bound, value=value, status=run.status, cpu=time.process_time() - cpu, schedule=sched)


def schedule_from_point(instance: Instance, x: list[list[int]], s: list[list[int]], r: list[list[int]]) -> Schedule:
    """A schedule that realises a relaxation point (x, s, r per request and batch).

    A (re)fill is one prefill item of the whole prompt (the prompt plus the tokens generated so
    far for a refill), a token not from a fill is a decode item, and a request that stops being
    resident before finishing (or refills while resident) is evicted before the batch (in an
    eviction-only batch when it is processed there). Its KV then equals the point's :math:`H`, so
    it keeps M, R_max and the token count; P and C for the prefill tokens are not in the
    relaxation, so the caller replays it.
    """
    reqs = instance.requests
    batches: list[Batch] = []
    G = [0] * len(reqs)
    for j in range(len(x[0]) if x else 0):
        items, evict, before = [], [], []
        for i, req in enumerate(reqs):
            held = j > 0 and r[i][j - 1] and G[i] < req.output_tokens
            if s[i][j]:
                if held:
                    before.append(req.id)
                items.append(Item(req.id, req.prompt_tokens + G[i]))
            elif x[i][j]:
                items.append(Item(req.id, 1))
            elif held and not r[i][j]:
                evict.append(req.id)
            G[i] += x[i][j]
        if before:
            batches.append(Batch((), tuple(before)))
        if items or evict:
            batches.append(Batch(tuple(items), tuple(evict)))
    return Schedule(instance.name, tuple(batches), {"policy": "residency-relaxation"})


@dataclass(frozen=True)
class CountResult:
    """Outcome of :func:`count_bound`.

    Attributes
    ----------
    bound
        Proven lower bound (seconds) on the makespan of every schedule within J batches with items.
    facts
        ``(p, B)`` pairs proven by the relaxation's infeasibility: a schedule with at most p prefill
        batches has more than B batches with items (B = J: it has more than p prefill batches).
    cpu
        Process CPU seconds spent.
    """

    bound: float
    facts: tuple[tuple[int, int], ...]
    cpu: float


def add_count_fact(
    model: cp_model.CpModel, prefill: list[cp_model.IntVar], nonempty: list[cp_model.IntVar], p: int, B: int
) -> None:
    """Add the fact (p, B) of :func:`count_bound` to ``model``: if at most p of the batch flags
    ``prefill`` are set, more than B of ``nonempty`` are."""
    few = model.NewBoolVar(f"few_prefill_{p}")
    model.Add(sum(prefill) <= p).OnlyEnforceIf(few)
    model.Add(sum(prefill) >= p + 1).OnlyEnforceIf(few.Not())
    model.Add(sum(nonempty) >= B + 1).OnlyEnforceIf(few)


def count_cost(k: Coefficients, B: int, p: int) -> float:
    """Least bias of B batches with items, p of them with prefill tokens: the other B - p have decode items."""
    return k.base * B + k.prefill_bias * p + k.decode_bias * (B - p)


def count_check(
    instance: Instance,
    J: int,
    p: int,
    B: int,
    facts: list[tuple[int, int]],
    symmetry: bool = True,
    budget: TimeBudget = NO_LIMIT,
) -> RelaxationModel:
    """The model of the check "at most p prefill batches and at most B batches with items" of
    :func:`count_bound`: the relaxation without objective, with the facts proven so far as rows
    (valid rows of the same relaxation); ``symmetry`` and ``budget`` (of the build) as in
    :class:`RelaxationModel`."""
    relax = RelaxationModel(instance, J, symmetry=symmetry, budget=budget)
    relax.m.Add(sum(relax.p) <= p)
    relax.m.Add(sum(relax.y) <= B)
    for q, b in facts:
        if q >= p:
            relax.m.Add(sum(relax.y) >= b + 1)
        else:
            add_count_fact(relax.m, relax.p, relax.y, q, b)
    relax.m.ClearObjective()
    return relax


def count_bound(
    instance: Instance,
    J: int,
    budget: TimeBudget = NO_LIMIT,
    threads: int | None = None,
    check_limit: float | None = None,
) -> CountResult:
    r"""Least batch counts proven by infeasibility of the relaxation, and the makespan bound they give.

    A relaxation with the extra rows :math:`\sum_j p_j \le p`, :math:`\sum_j y_j \le B` that
    CP-SAT proves infeasible shows that no schedule within J batches has at most p prefill batches
    and at most B batches with items (every such schedule is a point of it, module docstring). A
    schedule with B batches, p of them with prefill tokens, pays at least
    :math:`k_b B + k_{pb} p + k_{db} (B - p)` (:func:`count_cost`: a batch without prefill tokens has
    decode items) plus the token work W. So the makespan is at least W plus the least
    :func:`count_cost` over the pairs (B, p) that no fact excludes, with :math:`p \ge B_p`,
    :math:`B \ge \max(B_{min}, p)` (:func:`optsched.bounds.batch_counts`) and :math:`B \le J`.

    The checks raise p while "at most p prefill batches" is infeasible, then repeatedly take the p
    where the least cost is and check "at most p prefill batches and at most need(p) batches". With
    ``threads`` = n >= 2, n checks run at once, one CP-SAT worker each (one worker proves the hard
    checks with less CPU than a two-worker portfolio): the one where the least
    cost is and the ones where it would be if the running checks were proven (what a sequential
    search would check next when they are). Each check gets ``check_limit`` seconds (default: half
    the time left of ``budget``, at least :data:`CHECK_LIMIT`, so that an undecided check
    leaves time to the caller; without a limit, :data:`CHECK_LIMIT`), never past ``budget``, with the facts proven
    when it starts as rows. A check that is not proven infeasible proves nothing and ends the
    search (no new check starts); a fact proven by any check is valid whatever the order.
    """
    cpu = time.process_time()
    instance = linear_instance(instance)
    k = Coefficients.of(instance.cost_model).folded()
    b_min, bp_min = batch_counts(instance)
    work = math.fsum(request_work(instance))
    facts: list[tuple[int, int]] = []
    workers = max(1, threads or 2)

    def left() -> float:
        seconds = budget.left()
        return math.inf if seconds is None else seconds

    def infeasible(p: int, B: int, known: list[tuple[int, int]]) -> bool:
        if check_limit is not None:
            own = check_limit
        else:
            own = CHECK_LIMIT if not budget.limited else max(CHECK_LIMIT, left() / 2)
        check_budget = budget.within(own)
        try:
            relax = count_check(instance, J, p, B, known, budget=check_budget)

        except DeadlinePassed:  # not built in time: undecided
            return False
        return _solve(relax.m, check_budget, 1, False).status == Status.INFEASIBLE

    def need(p: int, known: list[tuple[int, int]]) -> int:
        """Least B a schedule with p prefill batches can have, given the facts ``known``."""
        return max(b_min, p, 1 + max((b for q, b in known if q >= p), default=0))

    def argmin(known: list[tuple[int, int]]) -> tuple[float, int]:
        return min(
            ((count_cost(k, need(p, known), p), p) for p in range(bp_min, J + 1) if need(p, known) <= J),
            default=(math.inf, J),
        )

    p = bp_min
    while p < J and left() > 0.05 and infeasible(p, J, facts):
        facts.append((p, J))
        p += 1
    with ThreadPoolExecutor(workers) as pool:  # raise the least count where the least cost is
        running: dict[Future[bool], tuple[int, int]] = {}
        stop = False
        while True:
            assumed = facts + list(running.values())
            while not stop and len(running) < workers and left() > 0.05:
                p = argmin(assumed)[1]
                pair = (p, need(p, assumed))
                if pair[1] >= J:
                    break
                running[pool.submit(infeasible, *pair, list(facts))] = pair
                assumed.append(pair)
            if not running:
                break
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                pair = running.pop(future)
                if future.result():
                    facts.append(pair)
                else:
                    stop = True
    return CountResult(work + argmin(facts)[0], tuple(facts), time.process_time() - cpu)
