r"""InferMax: the optimal iteration-level schedule with preemption (seed001 section 3.3).

The paper states the optimal scheduler as a CSP over requests :math:`i = 1..N` and batches
:math:`j = 1..J` (:math:`j = 0` is the initial state) and solves it with Gurobi for N = 4; it
publishes neither the solver nor a complete model (the paper's model and its fixes C1-C17:
docs/infermax.md). This module fixes the model exactly in the schedule semantics of
docs/schedule.md (replay in :mod:`optsched.schedule` is the judge) and the cost model of
docs/costmodel.md. Both backends
(:mod:`.cpsat`, :mod:`.mip`) build exactly this model; the code mirrors the numbering below.

Data
----
:math:`I_i` prompt, :math:`O_i` output tokens, :math:`U_i = I_i + O_i - 1` (most KV a request holds),
:math:`a_i` arrival; limits C (tokens per batch), P (prefill tokens per batch), M (KV slots),
:math:`R_{max}` (requests holding KV); coefficients of docs/costmodel.md multiplied by ``layers``
(the folded :class:`~optsched.costmodel.Coefficients`; the code reads each by its field, named in
brackets): :math:`k_b` (``base``), :math:`k_t` (``per_token``), :math:`k_{pb}, k_{pt}, k_{pq}`
(``prefill_bias``, ``prefill_per_token``, ``prefill_per_token_sq``), :math:`k_{pc}`
(``prefill_per_ctx``: per chunk token and cached key), :math:`k_{db}, k_{dt}, k_{dk}` (``decode_bias``,
``decode_per_token``, ``decode_per_kv``: decode bias, per item, per KV read), and the step-shape terms:
:math:`k_{tl}` (``per_tile``, per started tile of :math:`t` = ``token_tile`` tokens) and
:math:`k_{mk}` (``decode_per_max_kv``, per KV slot of the longest decode context).

Variables (per request i and batch j; paper names first)
--------------------------------------------------------
- :math:`e_{ij}` evicted just before batch j's processing; :math:`c_{ij} \in [0, \min(C, U_i)]` tokens processed;
  :math:`cz_{ij} = [c_{ij} > 0]`; :math:`g_{ij}` generates a token; :math:`d_{ij}` decode phase
  before batch j (paper: :math:`[m_{i,j-1} \ge I_{i,j-1}]`); :math:`dg_{ij} = d_{ij} \wedge \neg e_{ij} \wedge cz_{ij}`
  (a decode item; the paper's :math:`d \wedge g`, equal because a scheduled decode generates);
  :math:`m_{ij}` KV held after batch j; :math:`mz_{ij}` holds KV in batch j (for :math:`R_{max}`).
- Added (fixes C2, C7): :math:`G_{ij} = \sum_{j' \le j} g_{ij'}` tokens generated;
  :math:`done_{ij} = [G_{ij} = O_i]`; :math:`\hat m_{ij}` KV held after processing batch j and before
  the release of finished requests (the contract checks M and R_max there); :math:`pc_{ij}`
  prefill tokens, :math:`sq_{ij} = pc_{ij}^2`, :math:`kv_{ij} = dg_{ij} m_{i,j-1}` KV read by a decode;
  :math:`x_{ij} = pc_{ij} (\hat m_{ij} - c_{ij})` a prefill item's tokens times the KV before it
  (:math:`\hat m - c = (1 - e) m_{i,j-1}`; 0 for a decode item, whose :math:`pc` is 0; built only
  when :math:`k_{pc} > 0`);
  per batch :math:`y_j` (non-empty), :math:`hp_j` (has prefill), :math:`hd_j` (has decode);
  built only when their coefficient is > 0: :math:`tl_j \in [0, \lceil C / t \rceil]` the started
  tiles, :math:`t\, tl_j \ge \sum_i c_{ij}` and :math:`t\, tl_j \le \sum_i c_{ij} + t - 1` (so
  :math:`tl_j = \lceil \sum_i c_{ij} / t \rceil` exactly, 0 for an empty batch), and
  :math:`kvm_j = \max_i kv_{ij}` the longest decode context (0 without decode items, as the
  contract's :math:`[N_{dec} > 0] KV^{max}_{dec}`).
- The paper's :math:`I_{ij}` is not a separate variable. Its rule (2) (I := m + 1 when a decode-phase
  request is evicted, unchanged otherwise) gives, by induction, :math:`I_{i,j} = I_i + G_{i,j}`
  whenever the request is in prefill (a refill prompt is the original prompt plus every token
  generated so far), and in decode :math:`m_{i,j} = I_i + G_{i,j} - 1`. Every place the model reads
  :math:`I_{i,j-1}` (the prefill overrun bound, row 3 of (3), and the generation test) is therefore
  written with :math:`I_i + G_{i,j-1}`; this is exact, not a relaxation.

Constraints (initial state :math:`m_{i0} = G_{i0} = d_{i1} = done_{i0} = 0`)
--------------------------------------------------------------------------
(1)  termination: :math:`G_{iJ} \ge \Gamma_i`, with :math:`G_{ij} = G_{i,j-1} + g_{ij}` and the *goal*
     :math:`\Gamma_i = O_i` (so :math:`G_{iJ} = O_i`), except in the first-token model below.
(2)+(3) memory: :math:`\hat m_{ij} = (1 - e_{ij})\, m_{i,j-1} + c_{ij}`;
     no overrun past the prompt (row 3 of (3), fix C4): :math:`\hat m_{ij} \le I_i + G_{i,j-1}`
     (in decode this is (4)'s :math:`c \le 1`).
(4)  decode :math:`c \le 1` (implied above). The paper's :math:`e_{ij} \Rightarrow c_{ij} = 0` is
     replaced: an eviction in model batch j happens *before* its processing, and an evicted
     request may refill in the same model batch. The extracted schedule then puts the eviction in
     an eviction-only batch (cost 0) just before batch j, since the contract forbids an item for a
     request evicted in the same batch. This is exactly the contract's freedom (the exhaustive
     search found schedules that need such batches: a request processed in batches j-1 and j+1 and
     evicted in between, turning its decode into a refill that shares a prefill-only batch) without
     doubling J. A refilling request is in prefill: :math:`dg_{ij} = d_{ij} \wedge \neg e_{ij}
     \wedge cz_{ij}`.
C1   generation link: :math:`g_{ij} \Leftrightarrow \hat m_{ij} = I_i + G_{i,j-1}` (the prompt is
     complete after processing: a prefill chunk that completes it, or a decode step); hence
     :math:`g \le cz`.
C2   completion and release: :math:`done_{ij} \Leftrightarrow G_{ij} \ge O_i`;
     :math:`done_{ij} \Rightarrow m_{ij} = 0` (the contract releases KV at the end of the finishing
     batch), else :math:`m_{ij} = \hat m_{ij}`; no work after completion:
     :math:`cz_{ij} \le 1 - done_{i,j-1}`.
C13  an eviction needs KV: :math:`e_{ij} \Rightarrow m_{i,j-1} \ge 1` (the contract rejects others).
     Phase transition (definition of d): :math:`d_{i,j+1} = ((d_{ij} \wedge \neg e_{ij}) \vee g_{ij})
     \wedge \neg done_{ij}`; in decode :math:`m_{i,j-1} = I_i + G_{i,j-1} - 1`.
(5)  per batch: :math:`\sum_i c_{ij} \le C`; :math:`\sum_i pc_{ij} \le P` with
     :math:`pc = c - dg` (prefill tokens only, fix C6, as docs/schedule.md);
     :math:`\sum_i \hat m_{ij} \le M`; :math:`\sum_i mz_{ij} \le R_{max}`,
     :math:`mz_{ij} = [\hat m_{ij} > 0]`.
R1-R8 valid redundant rows (they change no solution, only tighten the LP relaxation that
     CP-SAT's and the MIP's bounds come from). Per batch, (5) is written
     R1 :math:`\sum_i c_{ij} \le C y_j`, R2 :math:`\sum_i pc_{ij} \le P\, hp_j`,
     R3 :math:`\sum_i dg_{ij} \le N\, hd_j`, R4 :math:`\sum_i \hat m_{ij} \le M y_j`,
     R5 :math:`\sum_i mz_{ij} \le R_{max} y_j`. Valid: :math:`c > 0` implies :math:`cz` hence
     :math:`y_j`; :math:`pc > 0` implies a prefill item (a decode item has :math:`c = 1 = dg`) hence
     :math:`hp_j`; :math:`dg` implies :math:`hd_j`; an empty batch comes after every non-empty
     one (C5), and after the last non-empty batch every request is done (G is constant over empty
     batches and (1) holds), so it holds no KV. Per request,
     R6 :math:`\sum_j \hat m_{ij} \ge A_i = \sum_{k=1}^{\Gamma_i} (I_i + k - 1)`: by C1 the batch
     that generates the k-th token holds :math:`\hat m = I_i + G_{i,j-1} = I_i + k - 1`, and the
     :math:`\Gamma_i` generating batches are distinct (evictions only add refill KV elsewhere);
     R7 :math:`\sum_j mz_{ij} \ge \Gamma_i` (those batches hold :math:`\ge I_i \ge 1` KV);
     R8 :math:`\sum_j c_{ij} \ge I_i + \Gamma_i - 1` (the batch generating token :math:`\Gamma_i`
     holds :math:`\hat m = I_i + \Gamma_i - 1`, all of it written by items since the last eviction). With R4 and R6 the
     LP sees :math:`\sum_j y_j \ge \sum_i A_i / M` (memory makes requests take turns).
C5   horizon and empty batches: :math:`cz_{ij} \le y_j`, :math:`y_j \le \sum_i cz_{ij}`,
     :math:`e_{ij} \le y_j` (an eviction can always move to the next batch with items, since it
     happens before that batch's processing), :math:`y_j \ge y_{j+1}` (empty batches last). Valid cuts:
     :math:`y_j \le hp_j + hd_j`, :math:`\sum_j y_j \ge B`, :math:`\sum_j hp_j \ge B_p` (least batch counts,
     :func:`optsched.bounds.batch_counts`, of the goals: with ``first_tokens`` in the first-token model). Symmetry
     breaking for identical requests (same I, O, arrival) :math:`i < i'`: :math:`done_{ij} \ge done_{i'j}` (renaming
     whole histories preserves every objective). J: see :func:`.data.horizon`.
C9   options: no hybrid batching :math:`hp_j + hd_j \le 1`; no chunked prefill
     :math:`(cz_{ij} \wedge \neg d_{ij}) \Rightarrow g_{ij}` (a prefill or refill completes its prompt in
     one batch); ``no_evict``: :math:`e \equiv 0`.
C10  online arrivals: start :math:`S_j \ge E_{j-1}`, :math:`S_j \ge a_i` if request i is in batch j
     (item or eviction), :math:`E_j = S_j + T_j` (a batch may wait through its ``start``, as the
     contract allows).

First-token model (``ttft`` with evictions and chunked prefill allowed)
----------------------------------------------------------------------
The mean TTFT depends only on the batches up to the last first token, and with evictions any such
prefix can be completed: evict every unfinished request that holds KV, then serve the unfinished
ones one at a time (refill the prompt plus the tokens generated so far in chunks of min(C, P),
which generates the next token, then decode alone; :func:`.schedules.serial_completion`), feasible because
every request fits alone (:func:`.schedules.serial_schedule`). So the model only asks for the first tokens,
goal :math:`\Gamma_i = 1` in (1), R6-R8 and the batch counts; every constraint of the batches it
has is unchanged. The prefix of an optimal schedule is a solution (its batches up to the last first
token satisfy every row, and there are at most J of them: :func:`.data.horizon`), and every solution
followed by the serial completion is a schedule with the same first tokens: the optima are equal.

Other fixes: C3 (the prose "max" form of (2) is not used; (2) itself is, through the
substitution above); C12 (code names: ``prompt``, ``output``, ``M`` is only the KV capacity, big-M
constants are per request and named ``big``/``U`` in :mod:`.mip`); C14 (eviction drops all KV, no
partial eviction); C15 (the solve times measured are in docs/performance.md); C16 (section 4.5 is
reproduced both ways: evictions free and forbidden, each against vLLM and vLLM-ef, docs/infermax.md).

Objective (fixes C7, C8, C11)
------------------------------
:math:`T_j = k_b y_j + k_t \sum_i c_{ij} + k_{pb} hp_j + k_{pt} \sum_i pc_{ij} + k_{pq} \sum_i sq_{ij}
+ k_{pc} \sum_i x_{ij} + k_{db} hd_j + k_{dt} \sum_i dg_{ij} + k_{dk} \sum_i kv_{ij} + k_{tl} tl_j
+ k_{mk} kvm_j`, the contract's batch time (the quadratic prefill term :math:`sq = pc^2`, the
prefill-context term :math:`x = pc (\hat m - c)`, the KV-read term :math:`kv = dg \cdot m_{i,j-1}`
and the step-shape terms exact).

Every bound the solve uses besides the backends' own (those of :mod:`optsched.bounds`, the residency
relaxation of :mod:`.relax` with the search of :mod:`.search`, the chunk bound of :mod:`.chunks`,
the KV-time bound of :mod:`.kvtime`, the trajectory bound of :mod:`.colgen`) and the horizon J
leave :math:`k_{pc}` out and read a *linear form* of the step-shape terms (:func:`linear_instance`):
the tile term as one tile per batch (:math:`k_{tl} \lceil n / t \rceil \ge k_{tl}`, added to
:math:`k_b`) or spread over the tokens (:math:`\ge (k_{tl} / t)\, n`, added to :math:`k_t`: the
profile's :meth:`~optsched.costmodel.CostModel.linear_twin`), the longest-context term as the mean
decode context (:math:`k_{mk} KV^{max} \ge (k_{mk} / D) KV_{dec}` with D the most decode items a
batch can have, added to :math:`k_{dk}`). Every batch of the instance costs no more under it, so
they stay proven by (F0) of :mod:`optsched.bounds` (the same batches at the same starts end no
later under it, so every value and batch count they bound is attained under it). The segment-list search
of :mod:`.segments` prices the true batch times; every schedule any phase finds is replayed under the
profile itself.

``makespan`` (default; the paper's total latency): :math:`\sum_j T_j` offline, :math:`E_J` with
arrivals. ``latency``: :math:`\frac1N \sum_i (F_i - a_i)`, :math:`F_i \ge E_j` where i finishes in j
(the backends minimise :math:`\sum_i F_i`, the same optimisation: the arrivals are constants).
``ttft``: :math:`\frac1N \sum_i (FT_i - a_i)`, :math:`FT_i \ge E_j` where i generates its first token.
Every backend reports its objective and bound in these units (:func:`.cpsat.objective_units`).

Exactness of the backends: the tile count and the longest decode context are exact in both. CP-SAT
states :math:`kvm_j` with ``AddMaxEquality``; the MIP with :math:`kvm_j \ge kv_{ij}` for every i
only, which is exact at the optimum: every objective is non-decreasing in the batch times and
:math:`k_{mk} > 0`, so lowering :math:`kvm_j` to :math:`\max_i kv_{ij}` never makes a point worse
(the MIP's optimum and bound are those of the exact model; the extracted batch times take the max of
the solution, and the schedule is replayed anyway). CP-SAT works on integers, so times are scaled by
:math:`10^k` (the smallest k making every coefficient an integer, e.g. :math:`k = 14` for the
shipped profiles); when no such k fits in 64-bit arithmetic, coefficients are rounded and the proven
bound is lowered by the largest possible rounding error (:attr:`Scaling.slack`). The MIP linearises
:math:`pc^2` exactly at integers through the binary expansion :math:`pc = \sum_b 2^b z_b`,
:math:`pc^2 = \sum_b 2^b (z_b \cdot pc)` with exact McCormick products of a binary and an integer,
and :math:`x = \sum_b 2^b (z_b \cdot (\hat m - c))` likewise.
Every schedule is replayed; the reported objective is the replayed one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

from ...bounds import batch_counts
from ...costmodel import Coefficients
from ...instance import Instance, InstanceError
from ...options import Flag, Name, OptionError, Options, PositiveFloat, PositiveInt, Share
from ...result import objective_named
from .. import BACKENDS

__all__ = [
    "MAX_CELLS",
    "OBJECTIVES",
    "RELAX_SHARE",
    "SCALE_MIN_REQUESTS",
    "InferMaxBoundOptions",
    "InferMaxInputError",
    "InferMaxOptions",
    "Scaling",
    "linear_instance",
    "symmetric_pairs",
]

#: Instances with at least this many requests are solved at scale (:mod:`.scale`; the exact search of
#: the residency relaxation handles up to about 10 requests; the CP-SAT model is too large beyond).
SCALE_MIN_REQUESTS = 12

#: The objectives the model solves (:data:`optsched.result.OBJECTIVE_TABLE`) and ``completion``, read
#: as ``latency`` (its alias): the model minimises the sum of finish (latency) or first-token (ttft)
#: times, and the objective is that sum less the constant sum of arrivals, over N; it maximises the
#: requests meeting their SLOs (goodput, :mod:`.goodput`).
OBJECTIVES = ("makespan", "latency", "ttft", "goodput", "completion")

#: Default share of the time limit given to the residency relaxation (option ``relax``).
RELAX_SHARE = 0.6
SOLVER_NAMES = BACKENDS["infermax"]


class InferMaxInputError(InstanceError):
    """An instance that the InferMax model cannot take (message names it)."""


#: Default of option ``max_cells``. A CP-SAT model costs about 13 KB of memory and 0.5 ms of
#: CPU per request-batch cell to build (N = 64, J = 349: 300 MB, 11.6 s); 200,000 cells stay
#: within about 3 GB and two minutes of building.
MAX_CELLS = 200_000


@dataclass(frozen=True)
class InferMaxOptions(Options):
    """Options of the InferMax solve (keys of the ``options`` mapping of the registry).

    Attributes
    ----------
    solver
        ``cpsat`` (default), ``highs``, ``cbc`` or ``gurobi``.
    objective
        ``makespan`` (default), ``latency`` (mean end-to-end latency; ``completion`` is its alias)
        or ``ttft`` (mean time to first token), seconds.
    no_evict, no_hybrid, no_chunk
        Forbid evictions, hybrid (prefill + decode) batches, chunked prefill (fix C9).
    time_limit, threads, log
        Solver controls.
    warm_start
        Policy name whose schedule seeds the solver (None: the best available schedule).
    horizon
        Number of batches J to use instead of the proven one (then optimality holds only
        relative to J, stated in the result).
    relax
        Share of the time limit for the residency relaxation (:mod:`.relax`) that bounds the
        makespan when memory binds (0 turns it off; ``true``/``false`` mean the default
        :data:`RELAX_SHARE` and 0).
    max_cells
        Largest model, in request-batch cells N J, that is built (default :data:`MAX_CELLS`);
        beyond it the solve reports the best candidate schedule and the proven bounds.
    early_exit
        Build no model when the best candidate schedule already meets a proven bound of
        :mod:`optsched.bounds` or of the residency relaxation (with :mod:`.chunks`) (default true;
        the tests that cross-check the backends turn it off).
    """

    problem = "infermax"
    solver: Literal[SOLVER_NAMES] = "cpsat"
    objective: Literal[OBJECTIVES] = "makespan"
    no_evict: Flag = False
    no_hybrid: Flag = False
    no_chunk: Flag = False
    time_limit: PositiveFloat | None = None
    threads: PositiveInt | None = None
    log: Flag = False
    warm_start: Name | None = None
    horizon: PositiveInt | None = None
    relax: Share | Flag = RELAX_SHARE
    max_cells: PositiveInt = MAX_CELLS
    early_exit: Flag = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "objective", objective_named(self.objective).name)
        if isinstance(self.relax, bool):
            object.__setattr__(self, "relax", RELAX_SHARE if self.relax else 0.0)

    def check(self) -> None:
        """``warm_start`` names a registered policy; ``goodput`` is solved with CP-SAT only; ``relax``
        (the residency relaxation bounds the makespan only) is for the makespan."""
        self.only_with("relax", self.objective == "makespan", "objective is 'makespan'")
        if self.objective == "goodput" and self.solver != "cpsat":
            raise OptionError(f"objective 'goodput': solver {self.solver!r} does not take it (use cpsat)")
        from ...policies import policy_names

        if self.warm_start is not None and self.warm_start not in policy_names():
            known = ", ".join(sorted(policy_names()))
            raise OptionError(f"option 'warm_start': unknown policy {self.warm_start!r} (known: {known})")


@dataclass(frozen=True)
class InferMaxBoundOptions(Options):
    """Options of the InferMax ``bounds``.

    Attributes
    ----------
    objective
        ``makespan`` (default), ``latency`` (alias ``completion``) or ``ttft``.
    method
        None (the bounds of :mod:`optsched.bounds` and the KV-time bound), ``lp`` (also the LP
        relaxation of the MIP), ``relax`` (also the residency relaxation, makespan with a KV
        capacity) or ``trajectory`` (also the trajectory bound of :mod:`.colgen`, the same).
    time_limit, threads
        The ``lp``, ``relax`` or ``trajectory`` bound's limit; ``relax``'s CP-SAT workers (the LP
        runs on HiGHS, which takes no thread count).
    max_cells
        Largest LP relaxation built (``lp``), as :class:`InferMaxOptions`.
    no_evict, no_hybrid, no_chunk
        The model's restrictions, as :class:`InferMaxOptions` (``lp`` and ``relax``).
    """

    problem = "infermax"
    what = "bound"
    objective: Literal[OBJECTIVES] = "makespan"
    method: Literal["lp", "relax", "trajectory"] | None = None
    time_limit: PositiveFloat | None = None
    threads: PositiveInt | None = None
    max_cells: PositiveInt = MAX_CELLS
    no_evict: Flag = False
    no_hybrid: Flag = False
    no_chunk: Flag = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "objective", objective_named(self.objective).name)

    def check(self) -> None:
        for option in ("no_evict", "no_hybrid", "no_chunk"):
            self.only_with(option, self.method in ("lp", "relax"), "method is 'lp' or 'relax'")
        # the LP relaxation runs on HiGHS, which takes no thread count (optsched.mipsolvers)
        self.only_with("threads", self.method == "relax", "method is 'relax'")
        self.only_with("max_cells", self.method == "lp", "method is 'lp'")

    def solve_options(self) -> InferMaxOptions:
        """The same settings as the solve's options (the bounds build the solve's model data)."""
        shared = ("objective", "time_limit", "threads", "max_cells", "no_evict", "no_hybrid", "no_chunk")
        return InferMaxOptions(**{name: getattr(self, name) for name in shared})


@dataclass(frozen=True)
class Scaling:
    """Integer scaling of times for CP-SAT: ``unit = 10**-power`` seconds.

    Attributes
    ----------
    power
        Times in seconds are multiplied by ``10**power``.
    coef
        The prices of the folded :class:`~optsched.costmodel.Coefficients` on the integer grid (each
        price times ``10**power``, rounded; ``layers`` and ``token_tile`` as they are).
    slack
        Upper bound (seconds) on how much the scaled objective of any schedule considered can
        undershoot its true value (0 when every coefficient is exact); the proven bound is lowered
        by it.
    exact
        True when every coefficient scaled exactly.
    """

    power: int
    coef: Coefficients
    slack: float
    exact: bool

    @property
    def factor(self) -> float:
        return 10.0**self.power

    def to_int_time(self, seconds: float) -> int:
        """A time in seconds rounded UP to the integer grid (used for arrivals)."""
        return math.ceil(seconds * self.factor - 1e-9)


def linear_instance(instance: Instance) -> Instance:
    r"""``instance`` under a linear form of its profile at or below every batch time of its
    schedules (module docstring: what every bound and relaxation reads); ``instance`` itself when the
    profile has no step-shape term.

    The tile term of a non-empty batch of n tokens, :math:`k_{tl} \lceil n / t \rceil`, is at least
    :math:`k_{tl}` (one tile) and at least :math:`(k_{tl} / t)\, n`. It becomes a per-batch cost
    (added to ``base``) when t times the least batch count B of :func:`optsched.bounds.batch_counts`
    covers the least token count :math:`\sum_i (I_i + O_i - 1)` (small batches), else a per-token one
    (as :meth:`~optsched.costmodel.CostModel.linear_twin`). The longest decode context is at least
    the mean one, and a batch has at most :math:`D = \min(N, C, R_{max})` decode items (one per
    request, each a token, each holding KV), so :math:`k_{mk} KV^{max} \ge (k_{mk} / D) KV_{dec}`
    (added to ``decode.per_kv``).
    """
    cm = instance.cost_model
    if not cm.has_shape_terms:
        return instance
    reqs, lim = instance.requests, instance.limits
    decodes = max(1, min(len(reqs), lim.token_budget, lim.max_running or len(reqs)))
    linear = replace(
        cm.linear_twin(),
        decode=replace(cm.decode, per_kv=cm.decode.per_kv + cm.decode.per_max_kv / decodes, per_max_kv=0.0),
    )
    tokens = sum(r.prompt_tokens + r.output_tokens - 1 for r in reqs)
    if cm.per_tile and cm.token_tile * batch_counts(instance)[0] >= tokens:
        linear = replace(linear, base=cm.base + cm.per_tile, per_token=cm.per_token)
    return replace(instance, cost_model=linear)


def symmetric_pairs(instance: Instance) -> tuple[tuple[int, int], ...]:
    """Consecutive pairs (i, i') of identical requests (same I, O, arrival), i < i'."""
    groups: dict[tuple[int, int, float], list[int]] = {}
    for i, r in enumerate(instance.requests):
        groups.setdefault((r.prompt_tokens, r.output_tokens, r.arrival), []).append(i)
    return tuple((g[k], g[k + 1]) for g in groups.values() for k in range(len(g) - 1))
