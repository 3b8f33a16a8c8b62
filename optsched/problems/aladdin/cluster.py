"""Multi-worker simulator: a router places requests at heartbeats onto W iteration-level workers.

Every ``heartbeat`` seconds the router collects the requests that arrived since the previous
heartbeat (a request arriving at ``a`` is placed at ``ceil(a / heartbeat) * heartbeat``), advances
every worker to that instant, reads each worker's unfinished requests (prompt, generated count ``g``
and decode time so far, from :meth:`optsched.policies.engine.Engine.request_state`) and calls the
placement method. Then each new request is delivered to its worker. Every worker is the core
iteration-level engine (:class:`optsched.policies.engine.Engine`) running the ``vllm`` policy (vLLM
v0 default mode: FCFS admission of whole prompts, prefill batches preempt decode, recompute-eviction
of the latest admitted request); a request is added to it with the delivering heartbeat as its
arrival, so it becomes visible at the first batch starting at or after that instant.

Lengths: the router never sees true output lengths. A request's planned length ``L_j`` is its
prediction (the :class:`~.predictor.BinPredictor` when one is given, else the instance's
``predicted_output_tokens``, else ``output_tokens``), re-predicted whenever the request is still
running at ``g >= L_j``. The engines run on the true lengths.

Results are judged by replay only: each worker's batches are replayed on the worker's sub-instance
(``instance.with_requests``); TTFT (arrival to first token, so including the wait for the heartbeat
and any queueing, docs/aladdin.md, A19) and ATGT (= TPOT of the contract) come from those replays, and SLO
attainment is the share of requests meeting both (requests without their own SLO get the instance's
top-level ``slo``). A worker schedule that does not replay cleanly raises, and so does a placement
that leaves a request out. With method ``exact``, the solver's library is loaded before the first
heartbeat, so that each heartbeat's time limit is spent on its placement.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ...budget import TimeBudget
from ...instance import SLO, Instance, Limits, Request
from ...policies.engine import Engine
from ...result import Status
from ...schedule import ReplayResult, Schedule, replay
from .exact import load_backend, solve_placement
from .heuristics import best_fit, jsq, power_of_two, rebalance, round_robin
from .models import AladdinModel, model_from_instance
from .placement import Job, PlacementProblem, PlacementResult, compile_problem
from .predictor import BinPredictor

__all__ = ["ClusterResult", "METHODS", "simulate_cluster", "with_top_level_slo", "place"]

#: Placement methods the router knows (``given``: a fixed request -> worker map).
METHODS = ("exact", "bestfit", "bestfit+rebalance", "jsq", "rr", "po2", "given")


@dataclass
class ClusterResult:
    """Outcome of :func:`simulate_cluster`.

    Attributes
    ----------
    method
        Placement method.
    workers
        Workers that existed (the fixed W, or those opened by best fit / exact).
    peak_workers
        Most workers holding unfinished requests right after a heartbeat's placement.
    placement
        Worker index per request id.
    replays
        Per worker, the replay of its schedule on its sub-instance.
    schedules
        Per worker, its schedule.
    sub_instances
        Per worker, its sub-instance.
    ttft, atgt
        Per request id (ATGT is None for one-token outputs, which are judged on TTFT only, A18).
    met
        Per request id, whether both SLOs hold.
    decision_times
        Wall seconds of each heartbeat's placement decision.
    overflows
        Requests placed without a feasible worker (fixed W full, or infeasible alone).
    """

    method: str
    workers: int
    peak_workers: int
    placement: dict[str, int]
    replays: list[ReplayResult]
    schedules: list[Schedule]
    sub_instances: list[Instance]
    ttft: dict[str, float]
    atgt: dict[str, float | None]
    met: dict[str, bool]
    decision_times: list[float] = field(default_factory=list)
    overflows: int = 0

    @property
    def attainment(self) -> float:
        """Share of requests meeting both TTFT and ATGT SLOs."""
        return sum(self.met.values()) / max(len(self.met), 1)

    def summary(self) -> dict[str, Any]:
        """JSON-friendly summary."""
        dec = np.array(self.decision_times) if self.decision_times else np.zeros(1)
        return {
            "method": self.method,
            "workers": self.workers,
            "peak_workers": self.peak_workers,
            "slo_attainment": self.attainment,
            "requests": len(self.met),
            "overflows": self.overflows,
            "decision_ms_median": float(np.median(dec) * 1e3),
            "decision_ms_max": float(np.max(dec) * 1e3),
        }


def with_top_level_slo(instance: Instance) -> Instance:
    """Give every request without its own SLO the instance's top-level ``slo`` (ttft, atgt)."""
    top = instance.extra.get("slo") or {}
    if not top:
        return instance
    default = SLO(ttft=top.get("ttft"), atgt=top.get("atgt"))
    reqs = [r if r.slo is not None else replace(r, slo=default) for r in instance.requests]
    return instance.with_requests(reqs)


def place(
    method: str,
    problem: PlacementProblem,
    *,
    solver: str = "cpsat",
    time_limit: float | None = None,
    errors: list[tuple[float, float]] | None = None,
    rng: np.random.Generator | None = None,
    rr_start: int = 0,
    given: dict[str, int] | None = None,
) -> PlacementResult:
    """Dispatch one heartbeat to a placement method (see :data:`METHODS`)."""
    if method == "given":
        if given is None or any(job.id not in given for job in problem.new):
            raise ValueError("method 'given' needs a worker for every request")
        assignment = {job.id: given[job.id] for job in problem.new}
        return PlacementResult(assignment=assignment, workers=0, status=Status.UNKNOWN, bound=None, method="given")
    if method == "exact":
        result = solve_placement(problem, solver=solver, budget=TimeBudget.of(time_limit))
        if result.status == Status.INFEASIBLE:  # fixed W too small: fall back to best fit's overflow rule
            result = best_fit(problem)
        return result
    if method == "bestfit":
        return best_fit(problem)
    if method == "bestfit+rebalance":
        cp = compile_problem(problem)
        return rebalance(problem, best_fit(problem, compiled=cp), errors or [], compiled=cp)
    if method == "jsq":
        return jsq(problem)
    if method == "rr":
        return round_robin(problem, start=rr_start)
    if method == "po2":
        return power_of_two(problem, rng=rng)
    raise ValueError(f"unknown placement method {method!r} (known: {', '.join(METHODS)})")


def _engine_limits(instance: Instance, model: AladdinModel) -> Limits:
    """Worker limits: the instance's, with KV slots from the placement capacity when absent."""
    lim = instance.limits
    kv = lim.kv_capacity
    if kv is None:
        kv = int(math.floor((model.kv_capacity - model.kv_per_request) / model.kv_per_token))
    return Limits(lim.token_budget, lim.prefill_budget, kv, lim.max_running)


def simulate_cluster(
    instance: Instance,
    method: str,
    workers: int | None = None,
    *,
    heartbeat: float = 1.0,
    predictor: BinPredictor | None = None,
    solver: str = "cpsat",
    time_limit: float | None = None,
    model: AladdinModel | None = None,
    seed: int = 0,
    assignment: dict[str, int] | None = None,
    ttft_margin: float = 0.0,
    record: list[PlacementProblem] | None = None,
) -> ClusterResult:
    """Simulate the cluster on an instance with arrivals.

    Parameters
    ----------
    instance
        Requests with arrivals, cost model of ONE worker, ``placement`` and ``slo`` objects.
    method
        One of :data:`METHODS`.
    workers
        Fixed worker count W; None lets ``exact`` and ``bestfit*`` open workers as needed (the
        baselines need W).
    heartbeat
        Seconds between placements.
    predictor
        Output-length predictor (None: the instance's predicted lengths, else the true ones).
    solver, time_limit
        Backend and per-heartbeat limit of ``exact``.
    model
        The Aladdin model (default: read from the instance).
    seed
        Seed of power-of-two's sampling.
    assignment
        For method ``given``: the worker of every request.
    ttft_margin
        Seconds taken off ``T_pre`` in the placement's (c') (docs/aladdin.md, A19: the heartbeat wait and the
        in-flight iteration also count in the measured TTFT); 0 is the paper's constraint.
    record
        When given, each heartbeat's placement problem is appended to it (benchmarks replay them).
    """
    if method not in METHODS:
        raise ValueError(f"unknown placement method {method!r} (known: {', '.join(METHODS)})")
    if workers is None and method in ("jsq", "rr", "po2"):
        raise ValueError(f"method {method!r} needs a fixed worker count")
    model = model or model_from_instance(instance)
    if ttft_margin:
        model = model.with_knobs(ttft=model.ttft - ttft_margin)
    cluster = _Cluster(with_top_level_slo(instance), model, workers or 0, predictor)
    if method == "exact":
        load_backend(solver)
    rng = np.random.default_rng(seed)
    rr_pointer = 0
    for slot, arrivals in _heartbeat_slots(cluster.inst, heartbeat):
        now = slot * heartbeat
        ongoing, errors = cluster.ongoing_jobs(now)
        new = tuple(Job(r.id, r.prompt_tokens, cluster.planned[r.id]) for r in arrivals)
        problem = PlacementProblem(model, ongoing, new, workers)
        if record is not None:
            record.append(problem)
        t0 = time.perf_counter()
        result = place(
            method,
            problem,
            solver=solver,
            time_limit=time_limit,
            errors=errors,
            rng=rng,
            rr_start=rr_pointer,
            given=assignment,
        )
        cluster.decision_times.append(time.perf_counter() - t0)
        rr_pointer += len(new)
        cluster.deliver(result, new, now)
    for eng in cluster.engines:
        eng.advance()
    return _judge(
        cluster.inst,
        method,
        cluster.engines,
        cluster.placement,
        cluster.peak,
        cluster.decision_times,
        cluster.overflows,
        cluster.limits,
    )


def _heartbeat_slots(inst: Instance, heartbeat: float) -> list[tuple[int, list[Request]]]:
    """The requests by heartbeat: slot ``k`` (at ``k * heartbeat``) takes those arrived since slot ``k - 1``."""
    slots: dict[int, list[Request]] = {}
    for r in inst.requests:
        slots.setdefault(int(math.ceil(r.arrival / heartbeat - 1e-12)), []).append(r)
    return sorted(slots.items())


class _Cluster:
    """The workers of :func:`simulate_cluster` and what the router knows of their requests.

    ``planned`` is each request's planned output length (predicted, re-predicted once exceeded),
    ``original`` its first prediction; ``assigned`` lists, per worker in delivery order, the requests
    still unfinished or inside their planned lifetime.
    """

    def __init__(self, inst: Instance, model: AladdinModel, workers: int, predictor: BinPredictor | None) -> None:
        self.inst = inst
        self.model = model
        self.predictor = predictor
        self.limits = _engine_limits(inst, model)
        self.engines: list[Engine] = [_worker(inst, self.limits, i) for i in range(workers)]
        self.assigned: list[list[str]] = [[] for _ in self.engines]
        self.by_id = {r.id: r for r in inst.requests}
        self.planned: dict[str, int] = {}
        for r in inst.requests:
            if predictor is not None:
                self.planned[r.id] = predictor.predict(r.prompt_tokens)
            else:
                self.planned[r.id] = r.predicted_output_tokens or r.output_tokens
        self.original = dict(self.planned)
        self.placement: dict[str, int] = {}
        self.decision_times: list[float] = []
        self.peak = 0
        self.overflows = 0

    def ongoing_jobs(self, now: float) -> tuple[tuple[tuple[Job, ...], ...], list[tuple[float, float]]]:
        """Advance every worker to ``now``; per worker its ongoing jobs and its error point (Alg. 2)."""
        ongoing, errors = [], []
        for i, eng in enumerate(self.engines):
            eng.advance(now)
            jobs, error, self.assigned[i] = self._worker_jobs(eng, self.assigned[i], now)
            ongoing.append(jobs)
            errors.append(error)
        return tuple(ongoing), errors

    def _worker_jobs(
        self, eng: Engine, rids: list[str], now: float
    ) -> tuple[tuple[Job, ...], tuple[float, float], list[str]]:
        """One worker's ongoing jobs, its error point ``(l_e, b_e)`` and the requests it keeps."""
        planned, original, model = self.planned, self.original, self.model
        jobs, l_err, b_err, keep = [], 0.0, 0.0, []
        for rid in rids:
            st = eng.request_state(rid)
            if st.finish is not None:  # overestimates still inside their planned lifetime
                planned_end = st.finish + (original[rid] - st.generated) * model.atgt
                if st.generated < original[rid] and now < planned_end:
                    l_err += st.generated - original[rid]
                    b_err -= 1
                    keep.append(rid)
                continue
            keep.append(rid)
            prompt = self.by_id[rid].prompt_tokens
            if st.generated >= planned[rid]:
                planned[rid] = self.predictor.repredict(prompt, st.generated) if self.predictor else st.generated + 1
            if planned[rid] > original[rid]:
                l_err += planned[rid]  # Alg. 2, literal underestimate increment (docs/aladdin.md, A9)
                b_err += 1
            # decode time until a new prefill can start: the end of the in-flight batch (the
            # engine has counted its tokens in st.generated already), not the heartbeat
            dec = max(now, eng.now) - st.first_token if st.first_token is not None else 0.0
            jobs.append(Job(rid, prompt, planned[rid], st.generated, max(dec, 0.0)))
        return tuple(jobs), (l_err, b_err), keep

    def deliver(self, result: PlacementResult, new: tuple[Job, ...], now: float) -> None:
        """Hand the heartbeat's new requests to their workers (opening workers as needed).

        Raises ``RuntimeError`` when the placement leaves one out: attainment is over every request.
        """
        missing = [job.id for job in new if job.id not in result.assignment]
        if missing:
            raise RuntimeError(f"placement {result.method!r} left request(s) {', '.join(missing[:5])} unplaced")
        self.overflows += len(result.unplaceable)
        for rid, i in result.assignment.items():
            while i >= len(self.engines):
                self.engines.append(_worker(self.inst, self.limits, len(self.engines)))
                self.assigned.append([])
            self.engines[i].add_request(replace(self.by_id[rid], arrival=now))
            self.assigned[i].append(rid)
            self.placement[rid] = i
        self.peak = max(self.peak, sum(1 for eng in self.engines if not eng.done()))


def _worker(inst: Instance, limits: Limits, index: int) -> Engine:
    """Worker ``index``: the core engine running vLLM's default policy."""
    return Engine(limits, inst.cost_model, "vllm", name=f"{inst.name}/worker{index}")


def _judge(
    inst: Instance,
    method: str,
    engines: list[Engine],
    placement: dict[str, int],
    peak: int,
    decision_times: list[float],
    overflows: int,
    limits: Limits,
) -> ClusterResult:
    replays, schedules, subs = [], [], []
    ttft: dict[str, float] = {}
    atgt: dict[str, float | None] = {}
    met: dict[str, bool] = {}
    for i, eng in enumerate(engines):
        reqs = [r for r in inst.requests if placement.get(r.id) == i]
        sub = replace(inst.with_requests(reqs, name=f"{inst.name}/worker{i}"), limits=limits)
        sched = Schedule(sub.name, eng.schedule().batches, {"policy": f"aladdin-{method}", "worker": i})
        if not reqs:
            subs.append(sub)
            schedules.append(sched)
            replays.append(ReplayResult(True, [], {}, [], [], [], [], [], [], None))
            continue
        rep = replay(sub, sched)
        if not rep.feasible:
            raise RuntimeError(f"worker {i} schedule does not replay cleanly: " + "; ".join(rep.violations[:3]))
        for rid, out in rep.outcomes.items():
            ttft[rid] = out.ttft  # type: ignore[assignment]
            atgt[rid] = out.tpot
            met[rid] = out.meets_slo
        subs.append(sub)
        schedules.append(sched)
        replays.append(rep)
    return ClusterResult(
        method, len(engines), peak, placement, replays, schedules, subs, ttft, atgt, met, decision_times, overflows
    )
