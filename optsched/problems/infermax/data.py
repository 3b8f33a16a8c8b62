"""The InferMax model's data for one instance: the horizon J, the limits, coefficients and options.

:func:`build_data` assembles :class:`ModelData`, which both backends (:mod:`.cpsat`, :mod:`.mip`)
read to build the model of :mod:`.model`; :func:`horizon` is the proven number of batches J (fix
C5 of docs/infermax.md); :func:`integer_scaling` the exact integer times of CP-SAT; :func:`fits`
and :func:`check_size` the option ``max_cells``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...bounds import batch_counts, prefill_alone_times, request_work
from ...budget import TimeBudget
from ...costmodel import Coefficients
from ...deadline import BuildStopped
from ...instance import Instance
from .model import InferMaxInputError, InferMaxOptions, Scaling, linear_instance, symmetric_pairs

__all__ = [
    "TTFT_PROOF_CELLS",
    "Horizon",
    "ModelData",
    "instance_fields",
    "build_data",
    "check_size",
    "fits",
    "horizon",
    "integer_scaling",
    "min_batch",
    "makespan_cap",
    "request_batch_grid",
]

#: The proven ttft horizon (:func:`horizon`) is used up to this many request-batch cells N J; it is
#: several times the makespan's (N times the mean TTFT against the makespan), and beyond this size
#: no proof is in reach of the solvers anyway, so larger instances keep the makespan's horizon.
TTFT_PROOF_CELLS = 20_000


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
            k.base
            + k.per_token * self.C
            + k.prefill_bias
            + k.prefill_per_token * chunk_cap
            + k.prefill_per_token_sq * sq
            + k.decode_bias
            + k.decode_per_token * self.N
            + k.decode_per_kv * kv
            + k.prefill_per_ctx * self.max_context_product()
            + k.per_tile * k.tiles(self.C)
            + k.decode_per_max_kv * self.max_context()
        )

    def max_context(self) -> int:
        r"""The longest decode context any batch can have: :math:`\max_i (U_i - 1)`."""
        return max((self.U(i) - 1 for i in range(self.N)), default=0)

    def max_context_product(self) -> int:
        r"""An upper bound on one batch's :math:`\sum_i x_{ij}`: chunks add up to at most min(P, C),
        each over at most :math:`U_i - 1` cached keys."""
        return min(self.P, self.C) * self.max_context()

    def time_cap(self) -> float:
        """An upper bound on every batch end time in the schedules the model must consider."""
        if self.options.objective in ("makespan", "latency") and self.horizon_proven:
            return self.upper_makespan_cap
        return max(self.arrival) + self.J * self.max_batch_time()

    @property
    def upper_makespan_cap(self) -> float:
        """The makespan of every schedule no worse than the best known (:func:`makespan_cap`)."""
        return makespan_cap(self.options.objective, self.upper_makespan, self.upper, self.arrival)

    def activity_bounds(self) -> Coefficients:
        """Upper bounds on the total activity of each priced cost term over the horizon (for the
        slack), as the field of its price."""
        chunk_cap = min(self.P, self.C)
        sq = min(chunk_cap * chunk_cap, sum(min(self.U(i), chunk_cap) ** 2 for i in range(self.N)))
        kv = sum(self.U(i) for i in range(self.N))
        J = self.J
        return self.coef._replace(
            base=J,
            per_token=J * self.C,
            prefill_bias=J,
            prefill_per_token=J * chunk_cap,
            prefill_per_token_sq=J * sq,
            decode_bias=J,
            decode_per_token=J * self.N,
            decode_per_kv=J * kv,
            prefill_per_ctx=J * self.max_context_product(),
            per_tile=J * self.coef.tiles(self.C),
            decode_per_max_kv=J * self.max_context(),
        )


def request_batch_grid(
    data: ModelData, make: Callable[[int, int], Any], budget: TimeBudget, what: str
) -> list[list[Any]]:
    """``make(i, j)`` for every request i and batch j of ``data``, checking ``budget`` per request
    (:class:`~optsched.deadline.DeadlinePassed`, a :class:`~optsched.deadline.BuildStopped`)."""
    rows = []
    for i in range(data.N):
        budget.check(what)

        rows.append([make(i, j) for j in range(data.J)])
    return rows


def fits(data: ModelData, cell_cost: int = 1) -> bool:
    """Whether the model of ``data`` has at most option ``max_cells`` request-batch cells, each
    counted ``cell_cost`` times."""
    return data.N * data.J * cell_cost <= data.options.max_cells


def check_size(data: ModelData, what: str, cell_cost: int = 1) -> None:
    """Raise :class:`~optsched.deadline.BuildStopped` when the model of ``data`` does not :func:`fit <fits>`."""
    cells = data.N * data.J
    if not fits(data, cell_cost):
        weight = "" if cell_cost == 1 else f" (each counted {cell_cost} times)"
        raise BuildStopped(
            f"{what} not built: N x J = {data.N} x {data.J} = {cells} cells{weight} exceeds option "
            f"'max_cells' = {data.options.max_cells}"
        )


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


def min_batch(coef: Coefficients) -> float:
    """Bias every non-empty batch pays at least under the folded ``coef`` (seconds): base plus the
    cheaper phase bias."""
    return coef.base + min(coef.prefill_bias, coef.decode_bias)


def _batches_within(time: float, work: float, prefill_batches: int, coef: Coefficients) -> int:
    """Most batches with items that end by ``time`` when they do ``work`` item work and at least
    ``prefill_batches`` of them hold prefill tokens (each batch costs at least :func:`min_batch`, a
    prefill batch ``prefill_bias - min(prefill_bias, decode_bias)`` more; idle time is >= 0)."""
    if min_batch(coef) <= 0:
        raise InferMaxInputError("cost_model: a non-empty batch must cost > 0 for a finite horizon")
    extra = prefill_batches * (coef.prefill_bias - min(coef.prefill_bias, coef.decode_bias))
    return max(1, math.floor((time - work - extra) / min_batch(coef) * (1 + 1e-9)))


def makespan_cap(objective: str, upper_makespan: float, upper_objective: float, arrival: Sequence[float]) -> float:
    r"""The largest makespan of a schedule whose objective is at most ``upper_objective``.

    For ``latency``: every latency is >= 0, so the last request L to finish has
    :math:`F_L - a_L \le \sum_i (F_i - a_i) \le N\, UB` and the makespan :math:`F_L \le
    \max_i a_i + N\, UB`; for the other objectives the best known makespan.
    """
    if objective == "latency":
        return max(arrival) + len(arrival) * upper_objective
    return upper_makespan


def horizon(
    instance: Instance,
    upper_makespan: float,
    upper_objective: float,
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
    makespan; for ``latency`` :func:`makespan_cap` of the best known mean latency.

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

    Every cost here is that of the linear form of :func:`.model.linear_instance`: every batch costs
    no more under it, so a schedule within a time under the profile is within it under that form
    ((F0) of :mod:`optsched.bounds`).

    Returns
    -------
    Horizon
    """
    instance = linear_instance(instance)
    coef = Coefficients.of(instance.cost_model).folded()
    cap = makespan_cap(options.objective, upper_makespan, upper_objective, [r.arrival for r in instance.requests])
    J_makespan = _batches_within(cap, math.fsum(request_work(instance)), batch_counts(instance)[1], coef)
    note = f"J = floor((UB {cap:.6g} s - work - prefill biases) / min batch {min_batch(coef):.6g} s) = {J_makespan}"
    if options.objective != "ttft":
        return Horizon(J_makespan, True, note)
    N = len(instance.requests)
    alone = prefill_alone_times(instance, [r.prompt_tokens for r in instance.requests]).tolist()
    last_first = max(r.arrival for r in instance.requests) + N * upper_objective - math.fsum(alone) + max(alone)
    J_first = _batches_within(
        last_first,
        math.fsum(request_work(instance, first_tokens=True)),
        batch_counts(instance, first_tokens=True)[1],
        coef,
    )
    first_note = (
        f"the last first token by {last_first:.6g} s (N x mean TTFT UB - prefill-alone times): "
        f"at most {J_first} batches up to it"
    )
    if options.no_evict or options.no_chunk:
        J = J_first + sum(r.output_tokens - 1 for r in instance.requests)
        proof = Horizon(J, True, f"{first_note}, plus at most sum(O - 1) batches after it, each generating: J = {J}")
    else:
        proof = Horizon(J_first, True, f"{first_note}; first-token model: J = {J_first}", first_tokens_only=True)
    if N * proof.J <= TTFT_PROOF_CELLS:
        return proof
    return Horizon(
        J_makespan,
        False,
        f"{note} (ttft: heuristic horizon, the proven J = {proof.J} exceeds "
        f"{TTFT_PROOF_CELLS} cells; optimality only relative to J)",
    )


def instance_fields(instance: Instance) -> dict[str, Any]:
    """The :class:`ModelData` fields read straight off ``instance``: the instance, its requests'
    ids, lengths and arrivals, the limits C, P (at most C), M and R_max, and ``online``."""
    reqs, lim = instance.requests, instance.limits
    return {
        "instance": instance,
        "ids": tuple(r.id for r in reqs),
        "prompt": tuple(r.prompt_tokens for r in reqs),
        "output": tuple(r.output_tokens for r in reqs),
        "arrival": tuple(r.arrival for r in reqs),
        "C": lim.token_budget,
        "P": min(lim.prefill_budget, lim.token_budget),
        "M": lim.kv_capacity,
        "R": lim.max_running,
        "online": any(r.arrival > 0 for r in reqs),
    }


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
        (:func:`.schedules.first_token_prefix`), which J is at least in the first-token model.
    """
    coef = Coefficients.of(instance.cost_model).folded()
    found = horizon(instance, upper_makespan, upper_objective, options)
    J, proven, note = found.J, found.proven, found.note
    J = max(J, prefix_batches if found.first_tokens_only and prefix_batches is not None else min_batches)
    if options.horizon is not None:
        proven = proven and options.horizon >= J
        note = f"J = {options.horizon} from option 'horizon' (proven bound {J})"
        J = options.horizon
    b_min, bp_min = batch_counts(instance, first_tokens=found.first_tokens_only)
    return ModelData(
        **instance_fields(instance),
        options=options,
        coef=coef,
        J=J,
        horizon_proven=proven,
        horizon_note=note,
        upper=upper_objective,
        upper_makespan=upper_makespan,
        goal=tuple(1 if found.first_tokens_only else r.output_tokens for r in instance.requests),
        symmetric_pairs=symmetric_pairs(instance),
        b_min=b_min,
        bp_min=bp_min,
    )


def integer_scaling(data: ModelData, max_magnitude: float = 2e15) -> Scaling:
    """The smallest power of ten that makes every coefficient an integer, within 64-bit safety.

    ``max_magnitude`` caps the scaled value of the largest time the model holds (:meth:`ModelData.time_cap`)
    so that CP-SAT's sums stay far below 2**63. When no exact power fits, the largest safe one is
    used and :attr:`.model.Scaling.slack` bounds the rounding error over all activities.
    """
    coefs = data.coef.priced()
    top = max(data.time_cap(), 1e-12)
    limit = max(0, math.floor(math.log10(max_magnitude / top)))
    power = limit
    for p in range(limit + 1):
        if all(abs(v * 10**p - round(v * 10**p)) <= 1e-6 for v in coefs.values()):
            power = p
            break
    scaled = {k: v * 10**power for k, v in coefs.items()}
    ints = {k: int(round(v)) for k, v in scaled.items()}
    activity = data.activity_bounds()
    slack = sum(abs(scaled[k] - ints[k]) * getattr(activity, k) for k in coefs) / 10**power
    exact = all(abs(scaled[k] - ints[k]) <= 1e-6 for k in coefs)
    if data.online:
        slack += data.N / 10**power  # arrivals rounded up to the grid: each finish may move one unit
    return Scaling(power=power, coef=data.coef._replace(**ints), slack=slack, exact=exact)
