"""Aladdin's request-placement problem (seed002 Sec. 4.2; docs/aladdin.md, "The paper's model"): data, checks.

Its exact solution is :mod:`.exact`.

At a scheduling heartbeat the new requests ``J_new`` are placed onto workers, some of which already
run ongoing requests ``J_old`` (no migration). Each request ``j`` has prompt ``l_j``, a planned
output length ``L_j`` (predicted, or re-predicted once exceeded, docs/aladdin.md, A3), ``g_j`` tokens generated
so far and ``t_j`` seconds of decoding so far (both 0 for new requests). Variables: ``x_ij`` (request
``j`` on worker ``i``), ``y_i`` (worker ``i`` used), ``z_i`` (worker ``i`` gets a new request, the
indicator of docs/aladdin.md, A5). Minimise ``sum_i y_i`` subject to

- (a) ``sum_i x_ij = 1`` for every new ``j`` (ongoing ``x_ij`` are constants);
- (b') ATGT (Eqs. 3, 4 linearised): ``sum_j x_ij (k2 (l_j + gamma L_j) + theta c2) <= theta (T_dec - c3) y_i``;
- (c') TTFT (Eq. 2): ``k1 sum_{j new} x_ij l_j + c1 z_i <= T_pre``;
- (d') prefill preemption: ``k1 sum_{j new} x_ij l_j + c1 z_i <= theta S_i`` with the worker's
  decode slack ``S_i = min_{j ongoing in decode} (T_dec g_j - t_j)`` (literal form, docs/aladdin.md, A6), or
  with ``slack = "atgt"`` ``T_dec (g_j - 1) - t_j`` (the decode intervals ATGT counts); workers
  without ongoing decode requests have no (d'). A big-M row is not needed: with
  ``z_i = 0`` the row reads ``0 <= theta S_i``, and when ``S_i < 0`` no new request may go to ``i``,
  which is imposed by fixing its ``x_ij`` to 0;
- ``z_i >= x_ij`` for new ``j``;
- (e') KV (Eq. 1), time measured from now: request ``j`` holds ``w_j[k] = kv(l_j + g_j + k - 1)`` at
  future iteration ``k = 1 .. e_j`` with end point ``e_j = L_j - g_j + 1``, and 0 afterwards; for each
  worker, ``sum_j x_ij w_j[k] <= M`` is checked at every end point ``k`` of the requests that may be
  on it (between end points the sum only grows, so these rows imply (e) for all ``k <= K``);
- (f) ``x_ij <= y_i``; (g), (h) binary; workers with ongoing requests have ``y_i = 1``.

Symmetry of the empty workers is broken by ``y_f >= y_{f+1}`` and by letting the ``f``-th empty
worker take only new requests ``j >= f`` (any solution relabels to that form).

All coefficients are turned into integers once (:func:`compile_problem`: times in nanoseconds, each
left-hand coefficient rounded up and each right-hand side down, so every integer-feasible placement
is feasible for the real-valued model). CP-SAT, the MIP backends and the heuristics all read that
one integer data, so they solve the same problem and cross-check exactly.
A request that violates (b'), (c') or (e') alone on an empty worker cannot be placed feasibly; it
gets a worker of its own, outside the model, and is reported as ``unplaceable``.
The offline problem (all requests known, the Fig. 3 setting) is the case with no ongoing requests.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ...result import Status
from .models import AladdinModel

__all__ = [
    "Job",
    "PlacementProblem",
    "PlacementResult",
    "CompiledProblem",
    "WorkerLoad",
    "compile_problem",
    "knapsack_bounds",
    "alone_unplaceable",
    "check_placement",
    "kv_units",
    "used_workers",
]

#: Time unit of the integer data: nanoseconds.
TIME_SCALE = 1e9


@dataclass(frozen=True)
class Job:
    """A request as the placement sees it.

    Attributes
    ----------
    id
        Request id.
    prompt
        ``l_in``.
    length
        ``L_j``: planned output length (prediction, or re-prediction once exceeded).
    generated
        ``g_j``: tokens generated so far (0 for a new request).
    decode_time
        ``t_j``: seconds since its first token (0 for a new request).
    """

    id: str
    prompt: int
    length: int
    generated: int = 0
    decode_time: float = 0.0

    @property
    def end(self) -> int:
        """End point ``e_j = L_j - g_j + 1`` (>= 1): the last future iteration holding KV."""
        return max(self.length - self.generated, 0) + 1

    @property
    def base(self) -> int:
        """Context at future iteration ``k`` is ``base + k`` tokens."""
        return self.prompt + self.generated - 1


@dataclass(frozen=True)
class PlacementProblem:
    """One heartbeat: ongoing requests per existing worker and the new requests.

    Attributes
    ----------
    model
        The worker model and knobs.
    ongoing
        Per existing worker, its ongoing jobs (an empty tuple for an idle worker).
    new
        The jobs to place.
    max_workers
        Most workers in total (existing + opened); None = as many as needed.
    """

    model: AladdinModel
    ongoing: tuple[tuple[Job, ...], ...]
    new: tuple[Job, ...]
    max_workers: int | None = None


def kv_units(model: AladdinModel, scale: float, tokens: np.ndarray) -> np.ndarray:
    """Integer KV units of contexts of ``tokens`` tokens: ``ceil(scale * kv(t) - 1e-9)``.

    The one rounding rule (:meth:`CompiledProblem.own_peak` applies it to one scalar).
    """
    return np.ceil(scale * (model.kv_per_token * tokens + model.kv_per_request) - 1e-9).astype(np.int64)


def _is_int(v: float) -> bool:
    return float(v).is_integer()


@dataclass
class CompiledProblem:
    """Integer data of a :class:`PlacementProblem` (shared by every backend and heuristic)."""

    problem: PlacementProblem
    kv_scale: float
    cap_b: int
    cap_c: int
    c1: int
    kv_cap: int
    wb_new: np.ndarray
    wp_new: np.ndarray
    cap_d: list[int | None]
    loads: list[WorkerLoad]

    @property
    def model(self) -> AladdinModel:
        return self.problem.model

    def weight_b(self, job: Job) -> int:
        """(b') coefficient of a job in nanoseconds, rounded up."""
        m = self.model
        value = m.k2 * (job.prompt + m.gamma * job.length) + m.theta * m.c2
        return int(math.ceil(TIME_SCALE * value - 1e-6))

    def weight_p(self, job: Job) -> int:
        """(c')/(d') coefficient of a new job in nanoseconds, rounded up."""
        return int(math.ceil(TIME_SCALE * self.model.k1 * job.prompt - 1e-6))

    def own_peak(self, job: Job) -> int:
        """``w_j`` at the job's end point, its largest element (integer units)."""
        m = self.model
        return math.ceil(self.kv_scale * (m.kv_per_token * (job.base + job.end) + m.kv_per_request) - 1e-9)

    def kv_profile(self, job: Job, points: np.ndarray) -> np.ndarray:
        """``w_j[k]`` (integer units) at the iterations ``points``."""
        w = kv_units(self.model, self.kv_scale, job.base + points)
        return np.where(points <= job.end, w, 0)

    def empty_load(self) -> WorkerLoad:
        """A load for a fresh (empty) worker."""
        return WorkerLoad(self, (), None)


def compile_problem(problem: PlacementProblem) -> CompiledProblem:
    """Integer data of a heartbeat problem (see the module docstring for the rounding rule)."""
    m = problem.model
    integral = all(_is_int(v) for v in (m.kv_per_token, m.kv_per_request, m.kv_capacity))
    kv_scale = 1.0 if integral else 1000.0
    cp = CompiledProblem(
        problem=problem,
        kv_scale=kv_scale,
        cap_b=int(math.floor(TIME_SCALE * m.theta * (m.atgt - m.c3) + 1e-6)),
        cap_c=int(math.floor(TIME_SCALE * m.ttft + 1e-6)),
        c1=int(math.ceil(TIME_SCALE * m.c1 - 1e-6)),
        kv_cap=int(math.floor(kv_scale * m.kv_capacity + 1e-9)),
        wb_new=np.zeros(0, dtype=np.int64),
        wp_new=np.zeros(0, dtype=np.int64),
        cap_d=[],
        loads=[],
    )
    cp.wb_new = np.array([cp.weight_b(j) for j in problem.new], dtype=np.int64)
    cp.wp_new = np.array([cp.weight_p(j) for j in problem.new], dtype=np.int64)
    for jobs in problem.ongoing:
        slacks = [m.decode_slack(j.generated, j.decode_time) for j in jobs if j.generated >= 1]
        cap_d = int(math.floor(TIME_SCALE * m.theta * min(slacks) + 1e-6)) if slacks else None
        cp.cap_d.append(cap_d)
        cp.loads.append(WorkerLoad(cp, jobs, cap_d))
    return cp


class WorkerLoad:
    """A worker's planned load: ongoing jobs plus the new jobs placed on it so far.

    Keeps the aggregates of (b')-(d') and the KV profile at its end points, so that testing one more
    job costs O(1) for (b')-(d') and O(n) numpy work for (e'); and the capacity_norm of Algorithm 1.
    """

    def __init__(self, cp: CompiledProblem, jobs: Sequence[Job], cap_d: int | None) -> None:
        self.cp = cp
        self.cap_d = cap_d
        self.jobs: list[Job] = list(jobs)
        self.new: list[Job] = []
        self.sum_b = sum(cp.weight_b(j) for j in jobs)
        self.sum_p = 0
        self.sum_peak = sum(cp.own_peak(j) for j in jobs)
        self.weighted_context = sum(j.prompt + cp.model.gamma * j.length for j in jobs)
        self._arrays: tuple[np.ndarray, np.ndarray] | None = None
        self._points: np.ndarray | None = None
        self._load: np.ndarray | None = None
        self._peak = 0

    def copy(self) -> WorkerLoad:
        """An independent copy (heuristics place tentatively on copies)."""
        other = object.__new__(WorkerLoad)
        other.__dict__.update(self.__dict__)
        other.jobs, other.new = list(self.jobs), list(self.new)
        return other

    @property
    def ends(self) -> np.ndarray:
        """End points of the jobs on the worker."""
        return self._job_arrays()[0]

    @property
    def bases(self) -> np.ndarray:
        """Context offsets of the jobs (context at iteration k is base + k)."""
        return self._job_arrays()[1]

    def _job_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        if self._arrays is None:
            self._arrays = (
                np.fromiter((j.end for j in self.jobs), np.int64, len(self.jobs)),
                np.fromiter((j.base for j in self.jobs), np.int64, len(self.jobs)),
            )
        return self._arrays

    @property
    def batch(self) -> int:
        """Requests on the worker (ongoing + placed)."""
        return len(self.jobs)

    def capacity_norm(self) -> float:
        """Algorithm 1's load: ``sqrt(b^2 + (sum(l_in + gamma L))^2)``."""
        return math.hypot(self.batch, self.weighted_context)

    def _profile_at(self, points: np.ndarray) -> np.ndarray:
        """Planned KV of the worker's jobs at iterations ``points`` (integer units)."""
        if len(self.ends) == 0:
            return np.zeros(len(points), dtype=np.int64)
        w = kv_units(self.cp.model, self.cp.kv_scale, self.bases[None, :] + points[:, None])
        return np.sum(np.where(self.ends[None, :] >= points[:, None], w, 0), axis=1)

    def load_profile(self) -> tuple[np.ndarray, np.ndarray]:
        if self._points is None:
            self._points = np.unique(self.ends)
            self._load = self._profile_at(self._points)
            self._peak = int(self._load.max()) if len(self._load) else 0
        return self._points, self._load  # type: ignore[return-value]

    def peak_kv(self, extra: Job | None = None) -> int:
        """Largest planned KV (integer units) over the end points, optionally with one more job."""
        points, load = self.load_profile()
        if extra is None:
            return self._peak
        e = extra.end
        mask = points <= e
        peak = int(np.max(load[mask] + self.cp.kv_profile(extra, points[mask]))) if mask.any() else 0
        at_end = int(self._profile_at(np.array([e], dtype=np.int64))[0]) + self.cp.own_peak(extra)
        rest = int(load[~mask].max()) if (~mask).any() else 0
        return max(peak, at_end, rest)

    def _kv_fits(self, job: Job, peak: int) -> bool:
        """(e') with ``job`` added; ``peak`` is the job's own largest KV.

        Quick accepts: every job's own peak at once fits, or the current peak plus the job's peak fits
        (the load between end points never exceeds the load at the next end point).
        """
        cap = self.cp.kv_cap
        if self.sum_peak + peak <= cap:
            return True
        self.load_profile()
        if self._peak + peak <= cap:
            return True
        return self.peak_kv(job) <= cap

    def violations(
        self, extra: Job | None = None, wb: int | None = None, wp: int | None = None, first_only: bool = False
    ) -> list[str]:
        """Which of (b'), (c'), (d'), (e') fail (with ``extra`` added as a new job)."""
        cp = self.cp
        out = []
        sum_b, sum_p, n_new = self.sum_b, self.sum_p, len(self.new)
        if extra is not None:
            sum_b += cp.weight_b(extra) if wb is None else wb
            sum_p += cp.weight_p(extra) if wp is None else wp
            n_new += 1
        if sum_b > cp.cap_b:
            out.append("b")
        if n_new and sum_p + cp.c1 > cp.cap_c:
            out.append("c")
        if self.cap_d is not None and (self.cap_d < 0 or (n_new and sum_p + cp.c1 > self.cap_d)):
            out.append("d")
        if out and first_only:
            return out
        if extra is None:
            if self.peak_kv() > cp.kv_cap:
                out.append("e")
        elif not self._kv_fits(extra, cp.own_peak(extra)):
            out.append("e")
        return out

    def fits(self, job: Job, wb: int | None = None, wp: int | None = None, peak: int | None = None) -> bool:
        """Whether (b')-(e') still hold with ``job`` added as a new request (scalar checks first).

        ``wb``, ``wp`` and ``peak`` are the job's (b') and (c') coefficients and its own KV peak,
        when the caller has them at hand.
        """
        cp = self.cp
        if self.sum_b + (cp.weight_b(job) if wb is None else wb) > cp.cap_b:
            return False
        pre = self.sum_p + (cp.weight_p(job) if wp is None else wp) + cp.c1
        if pre > cp.cap_c or (self.cap_d is not None and pre > self.cap_d):
            return False
        return self._kv_fits(job, cp.own_peak(job) if peak is None else peak)

    def forget_profile(self) -> None:
        self._points = self._load = self._arrays = None

    def add(self, job: Job, wb: int | None = None, wp: int | None = None) -> None:
        """Place a new job here (no check); the KV profile is updated in O(n), not rebuilt."""
        cp = self.cp
        if self._points is not None:
            points, load = self._points, self._load
            e = job.end
            load = load + cp.kv_profile(job, points)  # type: ignore[operator]
            if not np.any(points == e):
                at_e = int(self._profile_at(np.array([e], dtype=np.int64))[0]) + cp.own_peak(job)
                k = int(np.searchsorted(points, e))
                points, load = np.insert(points, k, e), np.insert(load, k, at_e)
            self._points, self._load, self._peak = points, load, int(load.max())
        self._arrays = None
        self.jobs.append(job)
        self.new.append(job)
        self.sum_b += cp.weight_b(job) if wb is None else wb
        self.sum_p += cp.weight_p(job) if wp is None else wp
        self.sum_peak += cp.own_peak(job)
        self.weighted_context += job.prompt + cp.model.gamma * job.length

    def remove(self, job: Job) -> None:
        """Take a new job off again (re-balancing)."""
        cp = self.cp
        k = self.jobs.index(job)
        self.jobs.pop(k)
        self.new.remove(job)
        self.sum_b -= cp.weight_b(job)
        self.sum_p -= cp.weight_p(job)
        self.sum_peak -= cp.own_peak(job)
        self.weighted_context -= job.prompt + cp.model.gamma * job.length
        self.forget_profile()


@dataclass(kw_only=True)
class PlacementResult:
    """A placement of the new jobs.

    Attributes
    ----------
    assignment
        Worker index per new job id (existing workers first, then opened ones).
    workers
        Workers used (``sum_i y_i``): existing workers with ongoing requests plus those that get one.
    status
        ``OPTIMAL``, ``TIME_LIMIT`` (the exact solve stopped), ``INFEASIBLE`` (``max_workers`` too
        small), ``FEASIBLE`` (best fit's placement) or ``UNKNOWN`` (a baseline's or a given
        placement: nothing checked).
    bound
        Proven lower bound on the workers (None when unknown).
    method, solver
        What produced it.
    unplaceable
        New jobs that cannot be placed feasibly even alone (each got a worker of its own).
    wall_time
        Seconds spent.
    """

    assignment: dict[str, int]
    workers: int
    status: Status
    bound: float | None
    method: str
    solver: str = ""
    unplaceable: list[str] = field(default_factory=list)
    wall_time: float = 0.0


def used_workers(problem: PlacementProblem, assignment: dict[str, int]) -> int:
    """``sum_i y_i`` of an assignment: workers with ongoing or placed requests."""
    used = {i for i, jobs in enumerate(problem.ongoing) if jobs}
    used.update(assignment.values())
    return len(used)


def check_placement(cp: CompiledProblem, assignment: dict[str, int], exempt: Sequence[str] = ()) -> list[str]:
    """Violations of (a)-(h) by an assignment (on the integer data); ``exempt`` jobs are alone by design."""
    problem = cp.problem
    out = [f"request {j.id!r}: not placed (a)" for j in problem.new if j.id not in assignment]
    n_exist = len(problem.ongoing)
    loads: dict[int, WorkerLoad] = {}
    for job in problem.new:
        i = assignment.get(job.id)
        if i is None:
            continue
        if i < 0 or (problem.max_workers is not None and i >= problem.max_workers):
            out.append(f"request {job.id!r}: worker {i} out of range")
            continue
        if i not in loads:
            loads[i] = WorkerLoad(cp, problem.ongoing[i], cp.cap_d[i]) if i < n_exist else cp.empty_load()
        loads[i].add(job)
    for i, load in sorted(loads.items()):
        if len(load.new) == 1 and load.new[0].id in exempt and len(load.jobs) == 1:
            continue
        for c in load.violations():
            out.append(f"worker {i}: constraint ({c}) violated by {[j.id for j in load.new]}")
    return out


def alone_unplaceable(cp: CompiledProblem) -> list[int]:
    """Indices of the new jobs that violate (b'), (c') or (e') alone on an empty worker: each gets a
    worker of its own, outside the model (module docstring)."""
    empty = cp.empty_load()
    return [k for k, job in enumerate(cp.problem.new) if not empty.fits(job, int(cp.wb_new[k]), int(cp.wp_new[k]))]


def knapsack_bounds(cp: CompiledProblem) -> dict[str, int]:
    """Valid lower bounds on ``sum_i y_i`` for every placement satisfying (a)-(h).

    A new job that cannot be placed even alone on an empty worker (:func:`alone_unplaceable`) gets a
    worker of its own: it counts one worker in each bound below, which sum over the other jobs only.

    - ``atgt``: every job (ongoing or new) loads (b') on some worker: ``ceil(sum wb / cap_b)``;
    - ``ttft``: workers receiving new jobs carry ``c1`` plus their prefill: ``ceil(sum wp / (T_pre - c1))``;
    - ``kv``: every job holds ``w_j[1]`` at the first iteration: ``ceil(sum w_j[1] / M)``;
    - ``ongoing``: the workers with ongoing requests.
    """
    problem = cp.problem
    unplaceable = set(alone_unplaceable(cp))
    placeable = [k for k in range(len(problem.new)) if k not in unplaceable]
    alone = len(unplaceable)
    jobs = [j for jobs in problem.ongoing for j in jobs] + [problem.new[k] for k in placeable]
    one = np.array([1], dtype=np.int64)
    sum_b = sum(cp.weight_b(j) for j in jobs)
    sum_kv = sum(int(cp.kv_profile(j, one)[0]) for j in jobs)
    sum_p = int(cp.wp_new[np.asarray(placeable, dtype=np.int64)].sum())
    room_c = cp.cap_c - cp.c1
    return {
        "atgt": alone + (math.ceil(sum_b / cp.cap_b) if cp.cap_b > 0 else (1 if jobs else 0)),
        "ttft": alone + (math.ceil(sum_p / room_c) if room_c > 0 else (1 if placeable else 0)),
        "kv": alone + (math.ceil(sum_kv / cp.kv_cap) if cp.kv_cap > 0 else (1 if jobs else 0)),
        "ongoing": sum(1 for o in problem.ongoing if o),
    }
