"""Iteration-level schedules and :func:`replay`, the one implementation of their semantics.

A :class:`Schedule` is a sequence of :class:`Batch` es (engine iterations); contract section 2
fixes what each batch does. :func:`replay` walks a schedule over an :class:`~optsched.instance.Instance`,
applies exactly those rules, and returns a :class:`ReplayResult`: every violation (naming batch and
request), per-request times and the schedule's :class:`Metrics`. Every schedule produced anywhere in
optsched (policies, formulations, exporters) is judged here.

Per request the state is ``m`` (KV slots held), ``I`` (current prompt length) and ``g`` (tokens
generated). In batch ``j``: (1) start = max(end of previous batch, the batch's ``start``);
(2) evictions: a decode-phase request's prompt becomes ``I := m + 1``, then ``m := 0``;
(3) items: prefill ``1 <= c <= I - m`` (completing the prompt generates a token), decode ``c = 1``
(generates a token); (4) limits C, P, M, R_max after processing; (5) finished requests release KV;
(6) end = start + T(batch), T with the prefill-context term over ``c * m`` (``m`` before the item).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from .instance import Instance, Request
from .jsonio import dumps_rows, gc_paused, write_text_atomic

__all__ = [
    "Batch",
    "Item",
    "Metrics",
    "ReplayResult",
    "RequestOutcome",
    "Schedule",
    "ScheduleError",
    "load_schedule",
    "replay",
]

#: Relative tolerance for time comparisons (batch starts, arrivals, SLOs).
TIME_RTOL = 1e-9
#: Most violations listed by :func:`replay` (the rest are counted).
MAX_VIOLATIONS = 200


class ScheduleError(ValueError):
    """A schedule file is malformed (not a semantic violation: those come from :func:`replay`)."""


@dataclass(frozen=True, slots=True)
class Item:
    """One request's work in a batch: ``tokens`` prefill tokens, or 1 for a decode step."""

    id: str
    tokens: int


@dataclass(frozen=True, slots=True)
class Batch:
    """One engine iteration: evictions first, then items.

    Attributes
    ----------
    items
        The work done in this iteration.
    evict
        Ids of requests whose KV is dropped before processing (recomputation).
    start
        Earliest start time (lets a schedule wait for arrivals); None = right after the previous batch.
    """

    items: tuple[Item, ...]
    evict: tuple[str, ...] = ()
    start: float | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.start is not None:
            out["start"] = self.start
        if self.evict:
            out["evict"] = list(self.evict)
        out["items"] = [{"id": it.id, "tokens": it.tokens} for it in self.items]
        return out


@dataclass(frozen=True)
class Schedule:
    """A schedule for the instance named :attr:`instance`.

    Attributes
    ----------
    instance
        Name of the instance it schedules.
    batches
        The iterations in order.
    meta
        Free-form provenance (policy, solver, status); written to JSON under ``"meta"``.
    """

    instance: str
    batches: tuple[Batch, ...]
    meta: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"instance": self.instance, "batches": [b.to_dict() for b in self.batches]}
        if self.meta:
            out["meta"] = dict(self.meta)
        return out

    def save(self, path: str | Path) -> None:
        """Write the schedule JSON atomically (nothing half-written on failure)."""
        with gc_paused():
            text = dumps_rows(self.to_dict(), "batches")
        write_text_atomic(path, text)

    @classmethod
    def from_dict(cls, data: Any, source: str = "<schedule>") -> "Schedule":
        """Parse the contract's schedule JSON; structural errors raise :class:`ScheduleError`."""
        if not isinstance(data, Mapping):
            raise ScheduleError(f"{source}: the schedule must be a JSON object")
        raw_batches = data.get("batches")
        if not isinstance(raw_batches, list):
            raise ScheduleError(f"{source}: field 'batches': must be a list")
        batches = [_parse_batch(b, j, source) for j, b in enumerate(raw_batches)]
        meta = data.get("meta") or {}
        if not isinstance(meta, Mapping):
            raise ScheduleError(f"{source}: field 'meta': must be an object")
        return cls(str(data.get("instance", "")), tuple(batches), meta)


def _parse_batch(raw: Any, j: int, source: str) -> Batch:
    where = f"{source}: batch {j}"
    if not isinstance(raw, Mapping):
        raise ScheduleError(f"{where}: must be an object")
    unknown = set(raw) - {"items", "evict", "start"}
    if unknown:
        raise ScheduleError(f"{where}: unknown field(s) {sorted(unknown)}")
    items_raw = raw.get("items", [])
    if not isinstance(items_raw, list):
        raise ScheduleError(f"{where}: field 'items': must be a list")
    items = []
    for k, it in enumerate(items_raw):
        rid = it.get("id") if isinstance(it, dict) else None
        if type(rid) is not str:
            raise ScheduleError(f"{where}: item {k}: field 'id': must be a string")
        tok = it.get("tokens")
        if type(tok) is not int:  # exact type: JSON true/false (bool) are not token counts
            raise ScheduleError(f"{where}: request {rid!r}: field 'tokens': must be an integer")
        items.append(Item(rid, tok))
    evict = raw.get("evict", [])
    if not isinstance(evict, list) or not all(isinstance(e, str) for e in evict):
        raise ScheduleError(f"{where}: field 'evict': must be a list of request ids")
    start = raw.get("start")
    if start is not None and (
        isinstance(start, bool) or not isinstance(start, (int, float)) or not math.isfinite(start)
    ):
        raise ScheduleError(f"{where}: field 'start': must be a number")
    return Batch(tuple(items), tuple(evict), None if start is None else float(start))


def load_schedule(path: str | Path) -> Schedule:
    """Read a schedule JSON file (:class:`ScheduleError` names the file and the field)."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ScheduleError(f"{path}: cannot read file ({exc.strerror})") from None
    with gc_paused():
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ScheduleError(f"{path}: malformed JSON at line {exc.lineno}: {exc.msg}") from None
        return Schedule.from_dict(data, source=str(path))


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class RequestOutcome:
    """What happened to one request under a schedule (times in seconds, absolute)."""

    request: Request
    first_token: float | None
    finish: float | None
    evictions: int

    @property
    def ttft(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.request.arrival

    @property
    def latency(self) -> float | None:
        return None if self.finish is None else self.finish - self.request.arrival

    @property
    def tpot(self) -> float | None:
        """(finish - first token) / (O - 1); None for one output token or unfinished."""
        if self.finish is None or self.first_token is None or self.request.output_tokens < 2:
            return None
        return (self.finish - self.first_token) / (self.request.output_tokens - 1)

    @property
    def meets_slo(self) -> bool:
        """Whether the request finished and met every SLO it carries (``atgt`` is read as TPOT)."""
        if self.finish is None:
            return False
        slo = self.request.slo
        if slo is None:
            return True
        checks = ((slo.ttft, self.ttft), (slo.e2e, self.latency), (slo.tpot, self.tpot), (slo.atgt, self.tpot))
        return all(
            target is None or value is None or value <= target * (1 + TIME_RTOL) for target, value in checks
        )


@dataclass(frozen=True)
class Metrics:
    """Schedule metrics of contract section 2 (times in seconds)."""

    makespan: float
    mean_latency: float
    mean_ttft: float
    mean_tpot: float | None
    throughput: float
    evictions: int
    slo_attainment: float
    G: float
    batches: int
    total_latency: float

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class ReplayResult:
    """Outcome of :func:`replay`.

    Attributes
    ----------
    feasible
        True when there is no violation and every request finished.
    violations
        Human-readable violations, each naming the batch and the request.
    outcomes
        Per request id, its :class:`RequestOutcome`.
    starts, ends
        Start and end time of every batch.
    kv_used, running
        KV slots held and requests holding KV after each batch's processing (before release).
    prefill_tokens, decode_items
        Per batch, the prefill tokens and decode items processed.
    metrics
        The schedule's :class:`Metrics` (None when infeasible).
    features
        Per batch, the cost model's arguments ``(n_tok, n_pre, s_pre, n_dec, kv_dec, x_pre)``
        (contract section 3), e.g. to refit a profile from measured batch times.
    generated, kv_held
        Per request (instance order), tokens generated and KV slots held after the last batch (the
        state an unfinished schedule leaves, e.g. to complete it).
    """

    feasible: bool
    violations: list[str]
    outcomes: dict[str, RequestOutcome]
    starts: list[float]
    ends: list[float]
    kv_used: list[int]
    running: list[int]
    prefill_tokens: list[int]
    decode_items: list[int]
    metrics: Metrics | None
    features: list[tuple[int, int, int, int, int, int]] = field(default_factory=list)
    generated: list[int] = field(default_factory=list)
    kv_held: list[int] = field(default_factory=list)


def compute_metrics(outcomes: Iterable[RequestOutcome], makespan: float, evictions: int, batches: int) -> Metrics:
    """Metrics of a complete schedule from its per-request outcomes."""
    outs = list(outcomes)
    n = len(outs)
    latencies = [o.latency for o in outs]
    ttfts = [o.ttft for o in outs]
    tpots = [o.tpot for o in outs if o.tpot is not None]
    total_latency = math.fsum(latencies)  # type: ignore[arg-type]
    met = sum(o.meets_slo for o in outs)
    tokens = sum(o.request.output_tokens for o in outs)
    return Metrics(
        makespan=makespan,
        mean_latency=total_latency / n,
        mean_ttft=math.fsum(ttfts) / n,  # type: ignore[arg-type]
        mean_tpot=math.fsum(tpots) / len(tpots) if tpots else None,
        throughput=tokens / makespan if makespan > 0 else math.inf,
        evictions=evictions,
        slo_attainment=met / n,
        G=met / total_latency if total_latency > 0 else math.inf,
        batches=batches,
        total_latency=total_latency,
    )


# --------------------------------------------------------------------------- replay


def replay(instance: Instance, schedule: Schedule | Sequence[Batch]) -> ReplayResult:
    """Apply the contract's semantics to a schedule and judge it.

    Parameters
    ----------
    instance
        The instance scheduled.
    schedule
        A :class:`Schedule` or a bare sequence of batches.

    Returns
    -------
    ReplayResult
        Violations (each naming batch and request), per-request outcomes, per-batch trace and, when
        feasible, the metrics.
    """
    batches = schedule.batches if isinstance(schedule, Schedule) else tuple(schedule)
    reqs = instance.requests
    n = len(reqs)
    index = {r.id: i for i, r in enumerate(reqs)}
    lim = instance.limits
    cap_c, cap_p = lim.token_budget, lim.prefill_budget
    cap_m = lim.kv_capacity if lim.kv_capacity is not None else math.inf
    cap_r = lim.max_running if lim.max_running is not None else math.inf
    cost = instance.cost_model

    m = [0] * n
    prompt = [r.prompt_tokens for r in reqs]
    gen = [0] * n
    out_len = [r.output_tokens for r in reqs]
    arrival = [r.arrival for r in reqs]
    finished = [False] * n
    first_token: list[float | None] = [None] * n
    finish: list[float | None] = [None] * n
    evicted = [0] * n
    kv_total = 0
    running = 0

    violations: list[str] = []
    dropped = 0

    def flag(msg: str) -> None:
        nonlocal dropped
        if len(violations) < MAX_VIOLATIONS:
            violations.append(msg)
        else:
            dropped += 1

    starts: list[float] = []
    ends: list[float] = []
    kv_trace: list[int] = []
    run_trace: list[int] = []
    pre_trace: list[int] = []
    dec_trace: list[int] = []
    feat_trace: list[tuple[int, int, int, int, int, int]] = []
    prev_end = 0.0
    total_evictions = 0

    for j, batch in enumerate(batches):
        start = prev_end
        if batch.start is not None:
            if batch.start < prev_end - TIME_RTOL * max(1.0, abs(prev_end)):
                flag(f"batch {j}: start {batch.start!r} is earlier than the previous batch's end {prev_end!r}")
            start = max(prev_end, batch.start)
        arrival_limit = start + TIME_RTOL * max(1.0, abs(start))

        # 2. evictions
        for rid in batch.evict:
            i = index.get(rid)
            if i is None:
                flag(f"batch {j}: request {rid!r}: unknown request in evict")
                continue
            if arrival[i] > arrival_limit:
                flag(f"batch {j}: request {rid!r}: evicted before its arrival {arrival[i]!r} (batch starts {start!r})")
            if finished[i]:
                flag(f"batch {j}: request {rid!r}: evicted after it finished")
                continue
            if m[i] == 0:
                flag(f"batch {j}: request {rid!r}: evicted without holding KV")
                continue
            if m[i] >= prompt[i]:
                prompt[i] = m[i] + 1
            kv_total -= m[i]
            running -= 1
            m[i] = 0
            evicted[i] += 1
            total_evictions += 1
        evicted_now = set(batch.evict)

        # 3. process
        n_tok = n_pre = s_pre = n_dec = kv_dec = x_pre = 0
        seen: set[int] = set()
        generated: list[int] = []
        for it in batch.items:
            i = index.get(it.id)
            if i is None:
                flag(f"batch {j}: request {it.id!r}: unknown request")
                continue
            if i in seen:
                flag(f"batch {j}: request {it.id!r}: more than one item in the batch")
                continue
            seen.add(i)
            if it.id in evicted_now:
                flag(f"batch {j}: request {it.id!r}: evicted and processed in the same batch")
                continue
            if finished[i]:
                flag(f"batch {j}: request {it.id!r}: processed after it finished")
                continue
            if arrival[i] > arrival_limit:
                flag(f"batch {j}: request {it.id!r}: processed before its arrival {arrival[i]!r} (batch starts {start!r})")
            c = it.tokens
            if c < 1:
                flag(f"batch {j}: request {it.id!r}: tokens = {c} < 1")
                continue
            if m[i] < prompt[i]:  # prefill
                room = prompt[i] - m[i]
                if c > room:
                    flag(f"batch {j}: request {it.id!r}: prefill chunk {c} exceeds the remaining prompt {room}")
                    continue
                if m[i] == 0:
                    running += 1
                x_pre += c * m[i]
                m[i] += c
                kv_total += c
                n_pre += c
                s_pre += c * c
                if m[i] == prompt[i]:
                    generated.append(i)
            else:  # decode
                if c != 1:
                    flag(f"batch {j}: request {it.id!r}: decode item with tokens = {c} (must be 1)")
                    continue
                kv_dec += m[i]
                n_dec += 1
                m[i] += 1
                kv_total += 1
                generated.append(i)
            n_tok += c

        # 4. limits after processing (finishing requests still hold their KV here)
        if n_tok > cap_c or n_pre > cap_p or kv_total > cap_m or running > cap_r:
            who = f" (requests {', '.join(repr(reqs[i].id) for i in sorted(seen)[:5])}{'...' if len(seen) > 5 else ''})"
            if n_tok > cap_c:
                flag(f"batch {j}: token budget exceeded: {n_tok} > C = {cap_c}{who}")
            if n_pre > cap_p:
                flag(f"batch {j}: prefill budget exceeded: {n_pre} > P = {cap_p}{who}")
            if kv_total > cap_m:
                flag(f"batch {j}: KV capacity exceeded: {kv_total} > M = {cap_m}{who}")
            if running > cap_r:
                flag(f"batch {j}: max running exceeded: {running} > R_max = {cap_r}{who}")
        kv_trace.append(kv_total)
        run_trace.append(running)
        pre_trace.append(n_pre)
        dec_trace.append(n_dec)
        feat_trace.append((n_tok, n_pre, s_pre, n_dec, kv_dec, x_pre))

        # 6. time; 5. finish
        end = start + cost.batch_time(n_tok, n_pre, s_pre, n_dec, kv_dec, x_pre)
        for i in generated:
            gen[i] += 1
            if first_token[i] is None:
                first_token[i] = end
            if gen[i] == out_len[i]:
                finished[i] = True
                finish[i] = end
                kv_total -= m[i]
                running -= 1
                m[i] = 0
        starts.append(start)
        ends.append(end)
        prev_end = end

    for i, r in enumerate(reqs):
        if not finished[i]:
            flag(f"request {r.id!r}: unfinished after the last batch ({gen[i]} of {out_len[i]} tokens generated)")
    if dropped:
        violations.append(f"... and {dropped} more violations")

    outcomes = {r.id: RequestOutcome(r, first_token[i], finish[i], evicted[i]) for i, r in enumerate(reqs)}
    feasible = not violations
    metrics = compute_metrics(outcomes.values(), prev_end, total_evictions, len(batches)) if feasible else None
    return ReplayResult(
        feasible, violations, outcomes, starts, ends, kv_trace, run_trace, pre_trace, dec_trace, metrics,
        feat_trace, gen, m,
    )
