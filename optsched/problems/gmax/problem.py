"""The static-batching G-maximisation instance and its one judge, ``calculateG``.

Problem (SLO-aware paper, Section 3.1, Eqs. 2-13 with the fixes of docs/gmax.md, items 1-3): all N requests
arrive at 0 and run in an ordered list of static batches :math:`B_0, \\dots, B_{M-1}`,
:math:`1 \\le |B_k| \\le B_{max}` and, with a memory capacity (Eq. 20,
:math:`token\\_num(m) = m \\mu / \\sigma`), :math:`\\sum_{i \\in B_k} (l_{in,i} + l_{out,i}) \\le C`.
A member ``i`` of a batch of size ``b`` runs for :math:`E_i(b)` (Eq. 17), its first token after
:math:`F_i(b)` (Eq. 18), at :math:`TP_i(b)` per output token (Eq. 19). The batch lasts
:math:`D_k = \\max_{i \\in B_k} E_i(|B_k|)` and the next starts when it ends (Eq. 11, fixed:
:math:`t_{wait,i} = \\sum_{k' < a_i} D_{k'}`). Then

- :math:`e2e_i = t_{wait,i} + E_i` (Eq. 4), :math:`TTFT_i = t_{wait,i} + F_i` (Eq. 8),
  :math:`TPOT_i = TP_i` (Eq. 9);
- :math:`x_i = [e2e_i \\le SLO^{e2e}_i]` for an ``"e2e"`` task (h = 1) and
  :math:`x_i = [TTFT_i \\le SLO^{ttft}_i \\wedge TPOT_i \\le SLO^{tpot}_i]` for a ``"chat"`` task
  (h = 0) (Eq. 7; an SLO the request does not carry is met);
- :math:`n = \\sum_i x_i` (Eq. 6), :math:`t = \\sum_i e2e_i` (Eq. 3), :math:`G = n / t` (Eq. 2),
  in requests per second (G = 0 when t = 0).

:func:`evaluate_g` is that computation (docs/gmax.md, "Evaluating a schedule", the paper's "calculateG"); every static
schedule any solver returns is judged by it.

Instance extension of the contract's JSON (documented in docs/gmax.md):
``"static_latency"`` (profile name or ``{"unit", "prefill", "decode"}``), ``"max_batch_size"``,
optional ``"memory"`` (``{"token_capacity": C}`` or ``{"bytes": m, "utility": mu,
"bytes_per_token": sigma}``), per request ``"task"`` (``"e2e"``/``"chat"``) and optionally
``"static_times"`` (``{"unit", "exec": [E(1)..E(B)], "prefill": [...], "tpot": [...]}``), which
overrides the predictor for that request (the paper's Fig. 4 is not affine in b).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...instance import Instance, InstanceError
from ..static_latency import UNITS, StaticTimes, static_latency_of

__all__ = ["GEvaluation", "GmaxProblem", "batch_violations", "evaluate_g", "g_core"]

LENGTHS = ("true", "predicted")


@dataclass(frozen=True)
class GmaxProblem:
    """A static-batching G-maximisation instance, times in seconds.

    Attributes
    ----------
    ids
        Request ids in instance order; everything else is indexed like them.
    e2e_task
        h_i: True for an ``"e2e"`` task, False for ``"chat"``.
    slo_e2e, slo_ttft, slo_tpot
        SLO thresholds in seconds (``inf`` when the request does not carry one).
    times
        :math:`E_i(b)`, :math:`F_i(b)`, :math:`TP_i(b)` for ``b = 1..max_batch_size``.
    need
        Tokens each request holds at completion, :math:`l_{in} + l_{out}`.
    capacity
        Token capacity of a batch (Eq. 20), or None.
    name
        Instance name.
    """

    ids: tuple[str, ...]
    e2e_task: tuple[bool, ...]
    slo_e2e: np.ndarray
    slo_ttft: np.ndarray
    slo_tpot: np.ndarray
    times: StaticTimes
    need: tuple[int, ...]
    capacity: float | None = None
    name: str = "static"

    @property
    def n_requests(self) -> int:
        return len(self.ids)

    @property
    def max_batch_size(self) -> int:
        return self.times.max_batch_size

    def fits(self, members: Sequence[int]) -> bool:
        """Whether indices ``members`` may form one batch (size and memory)."""
        if not 1 <= len(members) <= self.max_batch_size:
            return False
        return self.capacity is None or sum(self.need[i] for i in members) <= self.capacity

    def subset(self, indices: Sequence[int], name: str | None = None) -> GmaxProblem:
        """The problem restricted to the requests ``indices`` (in that order)."""
        idx = list(indices)
        return GmaxProblem(
            ids=tuple(self.ids[i] for i in idx),
            e2e_task=tuple(self.e2e_task[i] for i in idx),
            slo_e2e=self.slo_e2e[idx],
            slo_ttft=self.slo_ttft[idx],
            slo_tpot=self.slo_tpot[idx],
            times=StaticTimes(self.times.exec[idx], self.times.prefill[idx], self.times.tpot[idx]),
            need=tuple(self.need[i] for i in idx),
            capacity=self.capacity,
            name=name or self.name,
        )

    def meets_tpot(self, i: int, b: int) -> bool:
        """Whether request ``i`` meets its TPOT SLO in a batch of size ``b`` (needed for x_i, h=0)."""
        return self.e2e_task[i] or self.times.tpot[i, b - 1] <= self.slo_tpot[i]

    @classmethod
    def from_instance(cls, instance: Instance, lengths: str = "true") -> GmaxProblem:
        """Read the static-batching extension of an instance (see the module docstring).

        Parameters
        ----------
        lengths
            ``"true"`` schedules on ``output_tokens``; ``"predicted"`` on ``predicted_output_tokens``
            (falling back to ``output_tokens`` where absent).

        Raises
        ------
        InstanceError
            Naming the instance, request and field.
        """
        if lengths not in LENGTHS:
            raise InstanceError(f"option 'lengths': must be one of {LENGTHS}, got {lengths!r}")
        where = instance.name
        if "max_batch_size" not in instance.extra:
            raise InstanceError(f"{where}: field 'max_batch_size': missing (G-MAX's batch-size cap, docs/gmax.md)")
        bmax = instance.extra["max_batch_size"]
        if isinstance(bmax, bool) or not isinstance(bmax, int) or bmax < 1:
            raise InstanceError(f"{where}: field 'max_batch_size': must be an integer >= 1, got {bmax!r}")
        model = static_latency_of(instance)
        capacity = _capacity(instance.extra.get("memory"), where)
        rows_e, rows_f, rows_p, tasks, need = [], [], [], [], []
        slo = np.full((len(instance.requests), 3), math.inf)
        for i, r in enumerate(instance.requests):
            l_out = r.output_tokens
            if lengths == "predicted" and r.predicted_output_tokens is not None:
                l_out = r.predicted_output_tokens
            task = _task(r.extra.get("task"), r, where)
            tasks.append(task == "e2e")
            if r.arrival != 0:
                raise InstanceError(f"{where}: request {r.id!r}: field 'arrival': static batching needs 0")
            if r.slo is not None:
                slo[i] = [v if v is not None else math.inf for v in (r.slo.e2e, r.slo.ttft, r.slo.tpot)]
            table = r.extra.get("static_times")
            if table is not None:
                e, f, p = _table(table, bmax, task, f"{where}: request {r.id!r}: field 'static_times'")
            elif model is not None:
                tab = StaticTimes.from_model(model, [r.prompt_tokens], [l_out], bmax)
                e, f, p = tab.exec[0], tab.prefill[0], tab.tpot[0]
            else:
                raise InstanceError(
                    f"{where}: request {r.id!r}: no 'static_times' and the instance has no 'static_latency'"
                )
            rows_e.append(e)
            rows_f.append(f)
            rows_p.append(p)
            need.append(r.prompt_tokens + l_out)
            if capacity is not None and need[-1] > capacity:
                raise InstanceError(
                    f"{where}: request {r.id!r}: needs {need[-1]} tokens, more than memory capacity {capacity}"
                )
        times = StaticTimes(np.array(rows_e, float), np.array(rows_f, float), np.array(rows_p, float))
        return cls(
            ids=tuple(r.id for r in instance.requests),
            e2e_task=tuple(tasks),
            slo_e2e=slo[:, 0].copy(),
            slo_ttft=slo[:, 1].copy(),
            slo_tpot=slo[:, 2].copy(),
            times=times,
            need=tuple(need),
            capacity=capacity,
            name=instance.name,
        )


def _task(value: Any, r: Any, where: str) -> str:
    """h_i from the request's ``task``, or inferred from which SLOs it carries."""
    if value in ("e2e", "chat"):
        return str(value)
    if value is not None:
        raise InstanceError(f"{where}: request {r.id!r}: field 'task': must be 'e2e' or 'chat', got {value!r}")
    slo = r.slo
    has_e2e = slo is not None and slo.e2e is not None
    has_chat = slo is not None and (slo.ttft is not None or slo.tpot is not None)
    if has_e2e and not has_chat:
        return "e2e"
    if has_chat and not has_e2e:
        return "chat"
    raise InstanceError(f"{where}: request {r.id!r}: field 'task': missing ('e2e' or 'chat')")


def _capacity(spec: Any, where: str) -> float | None:
    """Batch token capacity from ``memory`` (Eq. 20: token_num(m) = m * mu / sigma)."""
    if spec is None:
        return None
    if not isinstance(spec, Mapping):
        raise InstanceError(f"{where}: field 'memory': must be an object")
    if "token_capacity" in spec:
        cap = spec["token_capacity"]
    else:
        try:
            cap = float(spec["bytes"]) * float(spec.get("utility", 1.0)) / float(spec["bytes_per_token"])
        except (KeyError, TypeError, ValueError, ZeroDivisionError):
            raise InstanceError(
                f"{where}: field 'memory': give 'token_capacity' or 'bytes', 'utility', 'bytes_per_token'"
            ) from None
    if isinstance(cap, bool) or not isinstance(cap, (int, float)) or not cap > 0:
        raise InstanceError(f"{where}: field 'memory': capacity must be > 0, got {cap!r}")
    return float(math.floor(cap))


def _table(spec: Any, bmax: int, task: str, where: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-request tabulated (exec, prefill, tpot) in seconds; unknown entries are NaN."""
    if not isinstance(spec, Mapping):
        raise InstanceError(f"{where}: must be an object")
    unit = spec.get("unit", "s")
    if unit not in UNITS:
        raise InstanceError(f"{where}.unit: must be one of {sorted(UNITS)}")
    out = []
    for key in ("exec", "prefill", "tpot"):
        values = spec.get(key)
        if values is None:
            if key == "exec" or task == "chat":
                raise InstanceError(f"{where}.{key}: missing (needed for a {task!r} task)")
            out.append(np.full(bmax, math.nan))
            continue
        if not isinstance(values, list) or len(values) < bmax:
            raise InstanceError(f"{where}.{key}: must list the times for batch sizes 1..{bmax}")
        if any(isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0 for v in values):
            raise InstanceError(f"{where}.{key}: times must be numbers >= 0")
        out.append(np.asarray(values[:bmax], float) * UNITS[unit])
    return out[0], out[1], out[2]


# ------------------------------------------------------------------------------------ calculateG


@dataclass(frozen=True)
class GEvaluation:
    """What :func:`evaluate_g` reports; times in seconds, G in requests per second."""

    n: int
    t: float
    G: float
    batches: tuple[tuple[str, ...], ...]
    e2e: dict[str, float]
    ttft: dict[str, float]
    tpot: dict[str, float]
    met: dict[str, bool]
    starts: tuple[float, ...]
    durations: tuple[float, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "t": self.t,
            "G": self.G,
            "batches": [list(b) for b in self.batches],
            "requests": {
                rid: {"e2e": self.e2e[rid], "ttft": self.ttft[rid], "tpot": self.tpot[rid], "meets_slo": self.met[rid]}
                for rid in self.e2e
            },
        }


def batch_violations(problem: GmaxProblem, batches: Sequence[Sequence[int]]) -> list[str]:
    """Why an ordered list of batches (request indices) is not a valid static schedule."""
    out: list[str] = []
    seen: dict[int, int] = {}
    for k, batch in enumerate(batches):
        if not 1 <= len(batch) <= problem.max_batch_size:
            out.append(f"batch {k}: size {len(batch)} outside 1..{problem.max_batch_size}")
        elif not problem.fits(batch):
            out.append(f"batch {k}: needs {sum(problem.need[i] for i in batch)} tokens > capacity {problem.capacity}")
        for i in batch:
            if not 0 <= i < problem.n_requests:
                out.append(f"batch {k}: unknown request index {i}")
            elif i in seen:
                out.append(f"batch {k}: request {problem.ids[i]!r} already in batch {seen[i]}")
            else:
                seen[i] = k
    missing = [problem.ids[i] for i in range(problem.n_requests) if i not in seen]
    if missing:
        out.append(f"requests never scheduled: {missing}")
    return out


def g_core(problem: GmaxProblem, batches: Sequence[Sequence[int]]) -> tuple[int, float]:
    """(n, t) of an ordered list of batches of request indices (calculateG's arithmetic, no checks).

    This is the inner loop of :func:`evaluate_g`, exposed for the simulated annealing, which calls
    it thousands of times on schedules its moves keep valid.
    """
    e_tab, f_tab, p_tab = problem.times.exec, problem.times.prefill, problem.times.tpot
    wait, n, t = 0.0, 0, 0.0
    for batch in batches:
        col = len(batch) - 1
        longest = 0.0
        for i in batch:
            ex = e_tab[i, col]
            e2e = wait + ex
            if problem.e2e_task[i]:
                n += e2e <= problem.slo_e2e[i]
            else:
                n += wait + f_tab[i, col] <= problem.slo_ttft[i] and p_tab[i, col] <= problem.slo_tpot[i]
            t += e2e
            longest = ex if ex > longest else longest
        wait += longest
    return int(n), float(t)


def g_value(n: int, t: float) -> float:
    """G = n / t (0 when t == 0, docs/gmax.md, item 34)."""
    return n / t if t > 0 else 0.0


def evaluate_g(problem: GmaxProblem, batches: Sequence[Sequence[int | str]]) -> GEvaluation:
    """calculateG (docs/gmax.md, "Evaluating a schedule"): judge an ordered list of static batches.

    Parameters
    ----------
    batches
        Ordered batches of request ids (or indices).

    Raises
    ------
    ValueError
        When the batches are not a valid static schedule (a request missing or repeated, a batch
        too large or over the memory capacity); the message names batch and request.
    """
    index = {rid: i for i, rid in enumerate(problem.ids)}
    try:
        idx = [[index[m] if isinstance(m, str) else int(m) for m in b] for b in batches]
    except KeyError as exc:
        raise ValueError(f"unknown request id {exc.args[0]!r}") from None
    bad = batch_violations(problem, idx)
    if bad:
        raise ValueError("invalid static schedule: " + "; ".join(bad))
    n, t = g_core(problem, idx)
    e2e, ttft, tpot, met = {}, {}, {}, {}
    starts, durations, wait = [], [], 0.0
    for batch in idx:
        col = len(batch) - 1
        starts.append(wait)
        for i in batch:
            rid = problem.ids[i]
            e2e[rid] = wait + float(problem.times.exec[i, col])
            ttft[rid] = wait + float(problem.times.prefill[i, col])
            tpot[rid] = float(problem.times.tpot[i, col])
            if problem.e2e_task[i]:
                met[rid] = bool(e2e[rid] <= problem.slo_e2e[i])
            else:
                met[rid] = bool(ttft[rid] <= problem.slo_ttft[i] and tpot[rid] <= problem.slo_tpot[i])
        durations.append(max(float(problem.times.exec[i, col]) for i in batch))
        wait += durations[-1]
    if n != sum(met.values()):  # g_core and this loop implement the same Eq. 7
        raise AssertionError("calculateG: inconsistent SLO accounting")
    return GEvaluation(
        n=n,
        t=t,
        G=g_value(n, t),
        batches=tuple(tuple(problem.ids[i] for i in b) for b in idx),
        e2e=e2e,
        ttft=ttft,
        tpot=tpot,
        met=met,
        starts=tuple(starts),
        durations=tuple(durations),
    )
