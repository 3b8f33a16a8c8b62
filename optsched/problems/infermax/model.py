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
:math:`R_{max}` (requests holding KV); coefficients of docs/costmodel.md multiplied by ``layers``:
:math:`k_b` (base), :math:`k_t` (per token), :math:`k_{pb}, k_{pt}, k_{pq}` (prefill bias, per token,
per squared chunk token), :math:`k_{pc}` (``prefill.per_ctx``: per chunk token and cached key),
:math:`k_{db}, k_{dt}, k_{dk}` (decode bias, per item, per KV read).

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
  per batch :math:`y_j` (non-empty), :math:`hp_j` (has prefill), :math:`hd_j` (has decode).
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
     happens before that batch's processing), :math:`y_j \ge y_{j+1}` (empty batches last). Valid cuts: :math:`y_j \le hp_j + hd_j`,
     :math:`\sum_j y_j \ge B`, :math:`\sum_j hp_j \ge B_p` (least batch counts, :func:`optsched.bounds.batch_counts`,
     of the goals: with ``first_tokens`` in the first-token model). Symmetry breaking for identical
     requests (same I, O, arrival) :math:`i < i'`: :math:`done_{ij} \ge done_{i'j}` (renaming whole
     histories preserves every objective). J: see :func:`horizon`.
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
which generates the next token, then decode alone; :func:`serial_completion`), feasible because
every request fits alone (:func:`serial_schedule`). So the model only asks for the first tokens,
goal :math:`\Gamma_i = 1` in (1), R6-R8 and the batch counts; every constraint of the batches it
has is unchanged. The prefix of an optimal schedule is a solution (its batches up to the last first
token satisfy every row, and there are at most J of them: :func:`horizon`), and every solution
followed by the serial completion is a schedule with the same first tokens: the optima are equal.

Other fixes: C3 (the prose "max" form of (2) is not used; (2) itself is, through the
substitution above); C12 (code names: ``prompt``, ``output``, ``M`` is only the KV capacity, big-M
constants are per request and named ``big``/``U`` in :mod:`.mip`); C14 (eviction drops all KV, no
partial eviction); C15 (the solve times measured are in docs/performance.md); C16 (section 4.5 is
reproduced both ways: evictions free and forbidden, each against vLLM and vLLM-ef, docs/infermax.md).

Objective (fixes C7, C8, C11)
------------------------------
:math:`T_j = k_b y_j + k_t \sum_i c_{ij} + k_{pb} hp_j + k_{pt} \sum_i pc_{ij} + k_{pq} \sum_i sq_{ij}
+ k_{pc} \sum_i x_{ij} + k_{db} hd_j + k_{dt} \sum_i dg_{ij} + k_{dk} \sum_i kv_{ij}`, the contract's
batch time (the quadratic prefill term :math:`sq = pc^2`, the prefill-context term
:math:`x = pc (\hat m - c)` and the KV-read term :math:`kv = dg \cdot m_{i,j-1}` exact).

Every bound the solve uses besides the backends' own (:mod:`optsched.bounds`, the residency
relaxation of :mod:`.relax` with the search of :mod:`.search`, the chunk bound of :mod:`.chunks`)
and the horizon J leave :math:`k_{pc}` out; they stay proven under a profile with
:math:`k_{pc} > 0` by (F0) of :mod:`optsched.bounds` (the same batches at the same starts cost
no more without the term, so every value and batch count they bound is attained without it). ``makespan`` (default; the paper's total latency): :math:`\sum_j T_j` offline, :math:`E_J`
with arrivals. ``completion``: :math:`\sum_i F_i`, :math:`F_i \ge E_j` where i finishes in j.
``ttft``: :math:`\frac1N \sum_i (FT_i - a_i)`, :math:`FT_i \ge E_j` where i generates its first token.

Exactness of the backends: CP-SAT works on integers, so times are scaled by :math:`10^k` (the
smallest k making every coefficient an integer, e.g. :math:`k = 14` for the shipped profiles);
when no such k fits in 64-bit arithmetic, coefficients are rounded and the proven bound is lowered
by the largest possible rounding error (:attr:`Scaling.slack`). The MIP linearises
:math:`pc^2` exactly at integers through the binary expansion :math:`pc = \sum_b 2^b z_b`,
:math:`pc^2 = \sum_b 2^b (z_b \cdot pc)` with exact McCormick products of a binary and an integer,
and :math:`x = \sum_b 2^b (z_b \cdot (\hat m - c))` likewise.
Every schedule is replayed; the reported objective is the replayed one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Mapping, Sequence

from .. import BACKENDS
from ...bounds import batch_counts, prefill_alone_time, request_work
from ...costmodel import CostModel
from ...deadline import BuildStopped, check
from ...instance import Instance, InstanceError
from ...options import Flag, Name, Options, PositiveFloat, PositiveInt, Share
from ...schedule import Batch, Item, ReplayResult, Schedule, replay

__all__ = [
    "Coefficients",
    "InferMaxBoundOptions",
    "InferMaxOptions",
    "ModelData",
    "Scaling",
    "build_data",
    "earliest_starts",
    "schedule_from_solution",
    "first_token_prefix",
    "serial_completion",
    "serial_schedule",
    "symmetric_pairs",
]

OBJECTIVES = ("makespan", "completion", "ttft")

#: Default share of the time limit given to the residency relaxation (option ``relax``).
RELAX_SHARE = 0.6
SOLVER_NAMES = BACKENDS["infermax"]


class InferMaxInputError(InstanceError):
    """An instance that the InferMax model cannot take (message names it)."""


#: Default of option ``max_cells``. A CP-SAT model costs about 13 KB of memory and 0.5 ms of
#: CPU per request-batch cell to build (N = 64, J = 349: 300 MB, 11.6 s); 200,000 cells stay
#: within about 3 GB and two minutes of building.
MAX_CELLS = 200_000

#: The proven ttft horizon (:func:`horizon`) is used up to this many request-batch cells N J; it is
#: several times the makespan's (N times the mean TTFT against the makespan), and beyond this size
#: no proof is in reach of the solvers anyway, so larger instances keep the makespan's horizon.
TTFT_PROOF_CELLS = 20_000


def request_batch_grid(
    data: "ModelData", make: Callable[[int, int], Any], deadline: float | None, what: str
) -> list[list[Any]]:
    """``make(i, j)`` for every request i and batch j of ``data``, checking ``deadline`` per request
    (:class:`~optsched.deadline.DeadlinePassed`, a :class:`~optsched.deadline.BuildStopped`)."""
    rows = []
    for i in range(data.N):
        check(deadline, what)
        rows.append([make(i, j) for j in range(data.J)])
    return rows


def fits(data: "ModelData", cell_cost: int = 1) -> bool:
    """Whether the model of ``data`` has at most option ``max_cells`` request-batch cells, each
    counted ``cell_cost`` times."""
    return data.N * data.J * cell_cost <= data.options.max_cells


def check_size(data: "ModelData", what: str, cell_cost: int = 1) -> None:
    """Raise :class:`~optsched.deadline.BuildStopped` when the model of ``data`` does not :func:`fit <fits>`."""
    cells = data.N * data.J
    if not fits(data, cell_cost):
        weight = "" if cell_cost == 1 else f" (each counted {cell_cost} times)"
        raise BuildStopped(
            f"{what} not built: N x J = {data.N} x {data.J} = {cells} cells{weight} exceeds option "
            f"'max_cells' = {data.options.max_cells}"
        )


@dataclass(frozen=True)
class InferMaxOptions(Options):
    """Options of the InferMax solve (keys of the ``options`` mapping of the registry).

    Attributes
    ----------
    solver
        ``cpsat`` (default), ``highs``, ``cbc`` or ``gurobi``.
    objective
        ``makespan`` (default), ``completion`` or ``ttft``.
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
        if isinstance(self.relax, bool):
            object.__setattr__(self, "relax", RELAX_SHARE if self.relax else 0.0)


@dataclass(frozen=True)
class InferMaxBoundOptions(Options):
    """Options of the InferMax ``bounds``.

    Attributes
    ----------
    objective
        ``makespan`` (default), ``completion`` or ``ttft``.
    method
        None (the bounds of :mod:`optsched.bounds` and the KV-time bound), ``lp`` (also the LP
        relaxation of the MIP), ``relax`` (also the residency relaxation, makespan with a KV
        capacity) or ``trajectory`` (also the trajectory bound of :mod:`.colgen`, the same).
    time_limit, threads
        The ``lp``, ``relax`` or ``trajectory`` bound's limit; the first two's threads.
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

    def check(self) -> None:
        for option in ("threads", "no_evict", "no_hybrid", "no_chunk"):
            self.only_with(option, self.method in ("lp", "relax"), "method is 'lp' or 'relax'")
        self.only_with("max_cells", self.method == "lp", "method is 'lp'")

    def solve_options(self) -> InferMaxOptions:
        """The same settings as the solve's options (the bounds build the solve's model data)."""
        shared = ("objective", "time_limit", "threads", "max_cells", "no_evict", "no_hybrid", "no_chunk")
        return InferMaxOptions(**{name: getattr(self, name) for name in shared})


@dataclass(frozen=True)
class Coefficients:
    """Cost coefficients in seconds, ``layers`` folded in (names as in the module docstring)."""

    k_b: float
    k_t: float
    k_pb: float
    k_pt: float
    k_pq: float
    k_db: float
    k_dt: float
    k_dk: float
    k_pc: float = 0.0

    @classmethod
    def from_cost_model(cls, cm: CostModel) -> "Coefficients":
        L = cm.layers
        return cls(
            k_b=L * cm.base,
            k_t=L * cm.per_token,
            k_pb=L * cm.prefill.bias,
            k_pt=L * cm.prefill.per_token,
            k_pq=L * cm.prefill.per_token_sq,
            k_db=L * cm.decode.bias,
            k_dt=L * cm.decode.per_token,
            k_dk=L * cm.decode.per_kv,
            k_pc=L * cm.prefill.per_ctx,
        )

    def as_dict(self) -> dict[str, float]:
        return dict(self.__dict__)

    @property
    def min_batch(self) -> float:
        """Bias every non-empty batch pays at least: base plus the cheaper phase bias."""
        return self.k_b + min(self.k_pb, self.k_db)


@dataclass(frozen=True)
class Scaling:
    """Integer scaling of times for CP-SAT: ``unit = 10**-power`` seconds.

    Attributes
    ----------
    power
        Times in seconds are multiplied by ``10**power``.
    coef
        Integer coefficient per name of :class:`Coefficients`.
    slack
        Upper bound (seconds) on how much the scaled objective of any schedule considered can
        undershoot its true value (0 when every coefficient is exact); the proven bound is lowered
        by it.
    exact
        True when every coefficient scaled exactly.
    """

    power: int
    coef: dict[str, int]
    slack: float
    exact: bool

    @property
    def factor(self) -> float:
        return 10.0**self.power

    def to_int_time(self, seconds: float) -> int:
        """A time in seconds rounded UP to the integer grid (used for arrivals)."""
        return math.ceil(seconds * self.factor - 1e-9)


@dataclass(frozen=True)
class ModelData:
    """Everything the backends need: requests, limits, coefficients, horizon, options.

    Attributes
    ----------
    ids, prompt, output, arrival
        Per request.
    C, P, M, R
        Limits (M, R are None when unlimited).
    J
        Number of batches.
    horizon_proven
        True when J provably admits an optimal schedule (see :func:`horizon`).
    horizon_note
        How J was obtained.
    upper
        Objective of the best known schedule (seconds), used for the horizon and time domains.
    online
        True when some request arrives after 0 (start-time variables are needed).
    lower
        A proven lower bound on the objective of every schedule within J batches (0 when none);
        the CP-SAT backend makes it the objective's lower end (offline makespan).
    count_facts
        ``(p, B)``: every schedule within J batches with at most p prefill batches has more than B
        batches with items (:func:`.relax.count_bound`); the CP-SAT backend adds them as rows.
    """

    instance: Instance
    options: InferMaxOptions
    coef: Coefficients
    ids: tuple[str, ...]
    prompt: tuple[int, ...]
    output: tuple[int, ...]
    arrival: tuple[float, ...]
    C: int
    P: int
    M: int | None
    R: int | None
    J: int
    horizon_proven: bool
    horizon_note: str
    upper: float
    upper_makespan: float
    online: bool
    goal: tuple[int, ...] = ()
    symmetric_pairs: tuple[tuple[int, int], ...] = field(default=())
    lower: float = 0.0
    count_facts: tuple[tuple[int, int], ...] = ()
    b_min: int = 1
    bp_min: int = 1

    @property
    def N(self) -> int:
        return len(self.ids)

    def U(self, i: int) -> int:
        """Most KV request ``i`` can hold: I + O - 1."""
        return self.prompt[i] + self.output[i] - 1

    @property
    def first_tokens_only(self) -> bool:
        """Whether this is the first-token model (every goal is 1 token; ttft, module docstring)."""
        return any(g < o for g, o in zip(self.goal, self.output))

    def reach(self, i: int) -> int:
        """KV request ``i`` holds when it generates its last modelled token: :math:`I_i + \\Gamma_i - 1`."""
        return self.prompt[i] + self.goal[i] - 1

    def area(self, i: int) -> int:
        """:math:`A_i = \\sum_{k=1}^{\\Gamma_i} (I_i + k - 1)`: KV the batches generating i's modelled
        tokens hold for it."""
        I, O = self.prompt[i], self.goal[i]
        return O * I + O * (O - 1) // 2

    @property
    def needs_time(self) -> bool:
        """Whether start/end time variables are needed (arrivals or a per-request objective)."""
        return self.online or self.options.objective != "makespan"

    def max_batch_time(self) -> float:
        """An upper bound on the time of any batch (seconds)."""
        k = self.coef
        chunk_cap = min(self.P, self.C)
        sq = min(chunk_cap * chunk_cap, sum(min(self.U(i), chunk_cap) ** 2 for i in range(self.N)))
        kv = sum(self.U(i) for i in range(self.N))
        return (
            k.k_b + k.k_t * self.C + k.k_pb + k.k_pt * chunk_cap + k.k_pq * sq
            + k.k_db + k.k_dt * self.N + k.k_dk * kv + k.k_pc * self.max_context_product()
        )

    def max_context_product(self) -> int:
        r"""An upper bound on one batch's :math:`\sum_i x_{ij}`: chunks add up to at most min(P, C),
        each over at most :math:`U_i - 1` cached keys."""
        return min(self.P, self.C) * max((self.U(i) - 1 for i in range(self.N)), default=0)

    def time_cap(self) -> float:
        """An upper bound on every batch end time in the schedules the model must consider."""
        if self.options.objective in ("makespan", "completion") and self.horizon_proven:
            # makespan <= objective for both (finish times are >= 0)
            return self.upper_makespan_cap
        return max(self.arrival) + self.J * self.max_batch_time()

    @property
    def upper_makespan_cap(self) -> float:
        return self.upper if self.options.objective == "completion" else self.upper_makespan

    def activity_bounds(self) -> dict[str, float]:
        """Upper bounds on the total activity of each cost term over the horizon (for the slack)."""
        chunk_cap = min(self.P, self.C)
        sq = min(chunk_cap * chunk_cap, sum(min(self.U(i), chunk_cap) ** 2 for i in range(self.N)))
        kv = sum(self.U(i) for i in range(self.N))
        J = self.J
        return {
            "k_b": J, "k_t": J * self.C, "k_pb": J, "k_pt": J * chunk_cap, "k_pq": J * sq,
            "k_db": J, "k_dt": J * self.N, "k_dk": J * kv, "k_pc": J * self.max_context_product(),
        }


def serial_schedule(instance: Instance, no_chunk: bool = False) -> Schedule:
    """The trivially feasible schedule: requests one at a time, in arrival order.

    Each request waits for its arrival, prefills its prompt in chunks of at most min(C, P) tokens
    (one chunk when ``no_chunk``) and then decodes alone. It is feasible exactly when every request
    is on its own (I + O - 1 <= M, R_max >= 1, C and P >= 1, and I <= min(C, P) without chunking);
    otherwise :class:`InferMaxInputError` names the request that can never be served.
    """
    lim = instance.limits
    chunk_cap = min(lim.token_budget, lim.prefill_budget)
    cost = instance.cost_model
    batches: list[Batch] = []
    clock = 0.0
    for r in sorted(instance.requests, key=lambda r: (r.arrival, instance.index(r.id))):
        if lim.max_running is not None and lim.max_running < 1:
            raise InferMaxInputError(f"request {r.id!r}: max_running = {lim.max_running} admits no request")
        if lim.kv_capacity is not None and r.max_kv > lim.kv_capacity:
            raise InferMaxInputError(
                f"request {r.id!r}: needs {r.max_kv} KV slots (prompt_tokens + output_tokens - 1) "
                f"> kv_capacity {lim.kv_capacity}"
            )
        if chunk_cap < 1 or (no_chunk and r.prompt_tokens > chunk_cap):
            raise InferMaxInputError(
                f"request {r.id!r}: prompt_tokens {r.prompt_tokens} cannot be prefilled "
                f"(min(token_budget, prefill_budget) = {chunk_cap}{', chunked prefill off' if no_chunk else ''})"
            )
        wait = r.arrival if r.arrival > clock else None  # a batch may not start before the last ends
        clock = max(clock, r.arrival)
        left = r.prompt_tokens
        while left > 0:
            c = min(left, chunk_cap)
            batches.append(Batch((Item(r.id, c),), start=wait))
            wait = None
            clock += cost.prefill_time(c, cached=r.prompt_tokens - left)
            left -= c
        for k in range(r.output_tokens - 1):
            batches.append(Batch((Item(r.id, 1),)))
            clock += cost.decode_time(1, r.prompt_tokens + k)
    return Schedule(instance.name, tuple(batches), {"policy": "serial"})


def first_token_prefix(schedule: Schedule, rep: ReplayResult) -> Schedule:
    """The batches of ``schedule`` (replayed as ``rep``) up to the one generating its last first token.

    Batches with items end strictly later one after the other (each costs > 0, :func:`horizon`), so
    that batch is the first with items ending at the last first-token time.
    """
    last = max(o.first_token for o in rep.outcomes.values() if o.first_token is not None)
    end = next(j for j, b in enumerate(schedule.batches) if b.items and rep.ends[j] >= last)
    return Schedule(schedule.instance, schedule.batches[: end + 1], dict(schedule.meta))


def serial_completion(instance: Instance, prefix: Schedule) -> Schedule:
    """``prefix`` followed by a serial completion of every request it leaves unfinished (evictions allowed).

    An eviction-only batch drops every unfinished request holding KV; then each unfinished request
    in instance order refills its prompt plus the g tokens it has generated (I + g tokens, the
    contract's refill prompt; I when g = 0) in chunks of at most min(C, P), which generates token
    g + 1, and decodes alone to its last token. The completion waits for the latest arrival among
    them. Feasible whenever :func:`serial_schedule` is (each request alone: I + O - 1 <= M,
    R_max >= 1).
    """
    state = replay(instance, prefix)
    lim = instance.limits
    chunk_cap = min(lim.token_budget, lim.prefill_budget)
    left = [(r, g, kv) for r, g, kv in zip(instance.requests, state.generated, state.kv_held) if g < r.output_tokens]
    holders = tuple(r.id for r, _, kv in left if kv > 0)
    latest = max((r.arrival for r, _, _ in left), default=0.0)
    tail: list[Batch] = [Batch((), holders)] if holders else []
    for r, g, _ in left:
        refill = r.prompt_tokens + g
        while refill > 0:
            tail.append(Batch((Item(r.id, min(refill, chunk_cap)),)))
            refill -= chunk_cap
        tail.extend(Batch((Item(r.id, 1),)) for _ in range(r.output_tokens - g - 1))
    if tail and latest > (state.ends[-1] if state.ends else 0.0):
        tail[0] = Batch(tail[0].items, tail[0].evict, latest)
    return Schedule(prefix.instance, prefix.batches + tuple(tail), dict(prefix.meta))


def symmetric_pairs(instance: Instance) -> tuple[tuple[int, int], ...]:
    """Consecutive pairs (i, i') of identical requests (same I, O, arrival), i < i'."""
    groups: dict[tuple[int, int, float], list[int]] = {}
    for i, r in enumerate(instance.requests):
        groups.setdefault((r.prompt_tokens, r.output_tokens, r.arrival), []).append(i)
    return tuple((g[k], g[k + 1]) for g in groups.values() for k in range(len(g) - 1))


@dataclass(frozen=True)
class Horizon:
    r"""A number of batches J for the model, and whether it provably admits an optimal schedule.

    Attributes
    ----------
    J
        Batches with items the model has.
    proven
        True when some optimal schedule has at most J batches with items (within the model's goal).
    note
        How J was obtained.
    first_tokens_only
        True for the first-token model of ``ttft`` (every goal :math:`\Gamma_i = 1`).
    """

    J: int
    proven: bool
    note: str
    first_tokens_only: bool = False


def _batches_within(time: float, work: float, prefill_batches: int, coef: Coefficients) -> int:
    """Most batches with items that end by ``time`` when they do ``work`` item work and at least
    ``prefill_batches`` of them hold prefill tokens (each batch costs at least ``coef.min_batch``,
    a prefill batch ``k_pb - min(k_pb, k_db)`` more; idle time is >= 0)."""
    if coef.min_batch <= 0:
        raise InferMaxInputError("cost_model: a non-empty batch must cost > 0 for a finite horizon")
    extra = prefill_batches * (coef.k_pb - min(coef.k_pb, coef.k_db))
    return max(1, math.floor((time - work - extra) / coef.min_batch * (1 + 1e-9)))


def horizon(
    instance: Instance, coef: Coefficients, upper_makespan: float, upper_objective: float,
    options: InferMaxOptions,
) -> Horizon:
    r"""A number of batches J that provably admits an optimal schedule (fix C5).

    J counts batches with items (eviction-only batches are implied, see the note on (4)). Every
    such batch costs at least :math:`\beta = k_b + \min(k_{pb}, k_{db})`, and at least
    :math:`B_p` of them (:func:`optsched.bounds.batch_counts`) hold prefill tokens and cost
    :math:`k_{pb} - \min(k_{pb}, k_{db})` more. The token work is at least :math:`W = \sum_i W_i`
    (:func:`optsched.bounds.request_work`). Hence any schedule with makespan at most :math:`T^{UB}` has at
    most :math:`J = \lfloor (T^{UB} - W - B_p (k_{pb} - \min(k_{pb}, k_{db}))) / \beta \rfloor`
    batches (idle time is >= 0). For ``makespan`` :math:`T^{UB}` is the best known
    makespan; for ``completion`` the best known sum of finish times (makespan <= sum).

    For ``ttft`` the objective does not bound the tail after the last first token, but it bounds
    that token's time: a schedule with mean TTFT at most :math:`UB` has
    :math:`\sum_i (FT_i - a_i) \le N\, UB` and :math:`FT_i - a_i \ge F(I_i)` (the least time to
    prefill the prompt alone, :func:`optsched.bounds.prefill_alone_time`), so its last first token
    (request L) comes at :math:`FT_L \le a_L + N\, UB - \sum_{i \ne L} F(I_i) \le T^{FT} =
    \max_i a_i + N\, UB - \sum_i F(I_i) + \max_i F(I_i)`. The batches up to it number at most
    :math:`J^{FT}`, the formula above with :math:`T^{FT}` and the work and counts of the first tokens
    (``first_tokens=True``: O_i = 1). Then

    - with evictions and chunked prefill allowed, the model is the *first-token model* (goal
      :math:`\Gamma_i = 1`, see the module docstring) over :math:`J = J^{FT}`;
    - without evictions or without chunked prefill, every item after the last first token
      generates a token (without evictions no prompt is left, so every item is a decode step;
      without chunked prefill every prefill item completes its prompt, C9), so at most
      :math:`\sum_i (O_i - 1)` batches with items follow it: :math:`J = J^{FT} + \sum_i (O_i - 1)`
      for the full model;
    - when the proven model would have more than :data:`TTFT_PROOF_CELLS` request-batch cells, J
      is the makespan's: not proven, optimality only relative to J.

    Returns
    -------
    Horizon
    """
    makespan_cap = upper_objective if options.objective == "completion" else upper_makespan
    J_makespan = _batches_within(
        makespan_cap, math.fsum(request_work(instance)), batch_counts(instance)[1], coef
    )
    note = (f"J = floor((UB {makespan_cap:.6g} s - work - prefill biases) / min batch "
            f"{coef.min_batch:.6g} s) = {J_makespan}")
    if options.objective != "ttft":
        return Horizon(J_makespan, True, note)
    N = len(instance.requests)
    alone = [prefill_alone_time(instance, r.prompt_tokens) for r in instance.requests]
    last_first = max(r.arrival for r in instance.requests) + N * upper_objective - math.fsum(alone) + max(alone)
    J_first = _batches_within(
        last_first, math.fsum(request_work(instance, first_tokens=True)),
        batch_counts(instance, first_tokens=True)[1], coef,
    )
    first_note = (f"the last first token by {last_first:.6g} s (N x mean TTFT UB - prefill-alone times): "
                  f"at most {J_first} batches up to it")
    if options.no_evict or options.no_chunk:
        J = J_first + sum(r.output_tokens - 1 for r in instance.requests)
        proof = Horizon(J, True, f"{first_note}, plus at most sum(O - 1) batches after it, each generating: J = {J}")
    else:
        proof = Horizon(J_first, True, f"{first_note}; first-token model: J = {J_first}", first_tokens_only=True)
    if N * proof.J <= TTFT_PROOF_CELLS:
        return proof
    return Horizon(J_makespan, False, f"{note} (ttft: heuristic horizon, the proven J = {proof.J} exceeds "
                                      f"{TTFT_PROOF_CELLS} cells; optimality only relative to J)")


def build_data(
    instance: Instance,
    options: InferMaxOptions,
    upper_makespan: float,
    upper_objective: float,
    min_batches: int,
    prefix_batches: int | None = None,
) -> ModelData:
    """Assemble :class:`ModelData`; J from :func:`horizon` (or ``options.horizon``).

    Parameters
    ----------
    upper_makespan, upper_objective
        Makespan and objective value of the best known feasible schedule.
    min_batches
        Non-empty batches of the warm-start schedule (J is at least this so that it fits).
    prefix_batches
        Non-empty batches of the warm-start schedule up to its last first token
        (:func:`first_token_prefix`), which J is at least in the first-token model.
    """
    coef = Coefficients.from_cost_model(instance.cost_model)
    found = horizon(instance, coef, upper_makespan, upper_objective, options)
    J, proven, note = found.J, found.proven, found.note
    J = max(J, prefix_batches if found.first_tokens_only and prefix_batches is not None else min_batches)
    if options.horizon is not None:
        proven = proven and options.horizon >= J
        note = f"J = {options.horizon} from option 'horizon' (proven bound {J})"
        J = options.horizon
    lim = instance.limits
    reqs = instance.requests
    b_min, bp_min = batch_counts(instance, first_tokens=found.first_tokens_only)
    return ModelData(
        instance=instance,
        options=options,
        coef=coef,
        ids=tuple(r.id for r in reqs),
        prompt=tuple(r.prompt_tokens for r in reqs),
        output=tuple(r.output_tokens for r in reqs),
        arrival=tuple(r.arrival for r in reqs),
        C=lim.token_budget,
        P=min(lim.prefill_budget, lim.token_budget),
        M=lim.kv_capacity,
        R=lim.max_running,
        J=J,
        horizon_proven=proven,
        horizon_note=note,
        upper=upper_objective,
        upper_makespan=upper_makespan,
        online=any(r.arrival > 0 for r in reqs),
        goal=tuple(1 if found.first_tokens_only else r.output_tokens for r in reqs),
        symmetric_pairs=symmetric_pairs(instance),
        b_min=b_min,
        bp_min=bp_min,
    )


def integer_scaling(data: ModelData, max_magnitude: float = 2e15) -> Scaling:
    """The smallest power of ten that makes every coefficient an integer, within 64-bit safety.

    ``max_magnitude`` caps the scaled value of the largest time the model holds (:meth:`ModelData.time_cap`)
    so that CP-SAT's sums stay far below 2**63. When no exact power fits, the largest safe one is
    used and :attr:`Scaling.slack` bounds the rounding error over all activities.
    """
    coefs = data.coef.as_dict()
    top = max(data.time_cap(), 1e-12)
    limit = max(0, math.floor(math.log10(max_magnitude / top)))
    power = limit
    for p in range(0, limit + 1):
        if all(abs(v * 10**p - round(v * 10**p)) <= 1e-6 for v in coefs.values()):
            power = p
            break
    scaled = {k: v * 10**power for k, v in coefs.items()}
    ints = {k: int(round(v)) for k, v in scaled.items()}
    activity = data.activity_bounds()
    slack = sum(abs(scaled[k] - ints[k]) * activity[k] for k in coefs) / 10**power
    exact = all(abs(scaled[k] - ints[k]) <= 1e-6 for k in coefs)
    if data.online:
        slack += data.N / 10**power  # arrivals rounded up to the grid: each finish may move one unit
    return Scaling(power=power, coef=ints, slack=slack, exact=exact)


def earliest_starts(
    data: ModelData, c: Sequence[Sequence[int]], e: Sequence[Sequence[int]], T_sec: Sequence[float]
) -> tuple[list[float | None], list[float]]:
    r"""Waits and ends (seconds) of every model batch for the items ``c`` and evictions ``e``, started
    as early as possible.

    :math:`S_j = \max(E_{j-1}, a_i` of every request with an item or eviction in j), :math:`E_j = S_j
    + T_j`. C10 bounds S only from below, so a solution's own :math:`S_j` may be later (a time-limited
    solve need not push it down); the replay starts every batch of :func:`schedule_from_solution`
    this early, so times and objectives computed from these ends agree with it.

    Returns
    -------
    (waits, ends)
        ``waits[j]`` is the arrival batch j waits for when one starts it later than :math:`E_{j-1}`
        (the batch's ``start``), else None.
    """
    waits: list[float | None] = []
    ends: list[float] = []
    for j in range(data.J):
        previous = ends[-1] if ends else 0.0
        latest = max([data.arrival[i] for i in range(data.N) if c[i][j] > 0 or e[i][j]], default=0.0)
        waits.append(latest if latest > previous else None)
        ends.append(max(previous, latest) + T_sec[j])
    return waits, ends


def schedule_from_solution(
    data: ModelData,
    c: Sequence[Sequence[int]],
    e: Sequence[Sequence[int]],
    waits: Sequence[float | None] | None,
    meta: Mapping[str, Any],
) -> Schedule:
    """Turn solution values ``c[i][j]``, ``e[i][j]`` (and the waits of :func:`earliest_starts`) into a schedule.

    Empty batches (no item, no eviction) are dropped; they cost nothing and change nothing. When a
    request is evicted and processed in the same model batch, the evictions go into an
    eviction-only batch (cost 0) placed just before it (the model's note on (4)).
    """
    batches: list[Batch] = []
    for j in range(data.J):
        items = tuple(Item(data.ids[i], int(c[i][j])) for i in range(data.N) if c[i][j] > 0)
        evict = tuple(data.ids[i] for i in range(data.N) if e[i][j])
        if not items and not evict:
            continue
        start = waits[j] if waits is not None else None
        if any(e[i][j] and c[i][j] > 0 for i in range(data.N)):
            batches.append(Batch((), evict, start))
            evict = ()
        batches.append(Batch(items, evict, start))
    return Schedule(data.instance.name, tuple(batches), dict(meta))


def hint_from_schedule(data: ModelData, schedule: Schedule) -> tuple[list[list[int]], list[list[int]]] | None:
    """Per (i, j) token counts and evictions of a schedule, padded to J (None if it does not fit).

    Evictions of a batch without items move to the next batch with items (the model's note on (4)).
    """
    batches = [b for b in schedule.batches if b.items]
    if len(batches) > data.J:
        return None
    index = {rid: i for i, rid in enumerate(data.ids)}
    c = [[0] * data.J for _ in range(data.N)]
    e = [[0] * data.J for _ in range(data.N)]
    j = 0
    for b in schedule.batches:
        for rid in b.evict:
            e[index[rid]][min(j, data.J - 1)] = 1
        if b.items:
            for it in b.items:
                c[index[it.id]][j] = it.tokens
            j += 1
    return c, e
