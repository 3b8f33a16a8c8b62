"""Iteration-level schedules and :func:`replay`, the one implementation of their semantics.

A :class:`Schedule` is a sequence of :class:`Batch` es (engine iterations); docs/schedule.md
fixes what each batch does. :func:`replay` walks a schedule over an :class:`~optsched.instance.Instance`,
applies exactly those rules, and returns a :class:`ReplayResult`: every violation (naming batch and
request), per-request times and the schedule's :class:`~optsched.metrics.Metrics` (computed in
:mod:`optsched.metrics`). Every schedule produced anywhere in
optsched (policies, formulations, exporters) is judged here.

Per request the state is ``m`` (KV slots held), ``I`` (current prompt length) and ``g`` (tokens
generated). In batch ``j``: (1) start = max(end of previous batch, the batch's ``start``);
(2) evictions: a decode-phase request's prompt becomes ``I := m + 1``, then ``m := 0``;
(3) items: prefill ``1 <= c <= I - m`` (completing the prompt generates a token), decode ``c = 1``
(generates a token); (4) limits C, P, M, R_max after processing; (5) finished requests release KV;
(6) end = start + T(batch), T with the prefill-context term over ``c * m`` (``m`` before the item).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .instance import MAX_ARRIVAL, Instance
from .jsonio import dumps_rows, gc_paused, loads_json, read_text, write_text_atomic
from .metrics import TIME_RTOL, Metrics, RequestOutcome, compute_metrics
from .replayresult import ReplayResult
from .schedcols import ScheduleColumns, columns_of_batches
from .schedfile import is_parquet_path, read_columns, write_parquet
from .tiering import use_compiled

__all__ = [
    "Batch",
    "Item",
    "Metrics",
    "ReplayResult",
    "RequestOutcome",
    "Schedule",
    "ScheduleError",
    "TIME_RTOL",
    "compute_metrics",
    "item_phases",
    "load_schedule",
    "replay",
]

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


class Schedule:
    """A schedule for the instance named :attr:`instance`.

    Its batches are :class:`Batch` objects, :class:`~optsched.schedcols.ScheduleColumns` or both, each
    built from the other at its first use (:attr:`batches`, :meth:`columns`).

    Attributes
    ----------
    instance
        Name of the instance it schedules.
    batches
        The iterations in order.
    meta
        Free-form provenance (policy, solver, status); written to JSON under ``"meta"``.
    """

    __slots__ = ("instance", "meta", "_batches", "_columns")

    def __init__(
        self,
        instance: str,
        batches: Sequence[Batch] | None = None,
        meta: Mapping[str, Any] | None = None,
        *,
        columns: ScheduleColumns | None = None,
    ) -> None:
        self.instance = instance
        self.meta: Mapping[str, Any] = {} if meta is None else meta
        self._batches = None if batches is None and columns is not None else tuple(batches or ())
        self._columns = columns

    @property
    def batches(self) -> tuple[Batch, ...]:
        if self._batches is None:
            self._batches = self._columns.to_batches(Item, Batch)  # type: ignore[union-attr]
        return self._batches

    def columns(self) -> ScheduleColumns:
        """The batches as columns (:class:`OverflowError` for a token count beyond 64 bits)."""
        if self._columns is None:
            self._columns = columns_of_batches(self.batches)
        return self._columns

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Schedule):
            return NotImplemented
        return (self.instance, self.batches, dict(self.meta)) == (other.instance, other.batches, dict(other.meta))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"instance": self.instance, "batches": [b.to_dict() for b in self.batches]}
        if self.meta:
            out["meta"] = dict(self.meta)
        return out

    def save(self, path: str | Path) -> None:
        """Write the schedule atomically (nothing half-written on failure): Parquet for a
        ``.parquet`` path, in any case (:mod:`optsched.schedfile`), JSON otherwise."""
        if is_parquet_path(path):
            write_parquet(path, self.instance, self.meta, self.columns())
            return
        with gc_paused():
            text = dumps_rows(self.to_dict(), "batches")
        write_text_atomic(path, text)

    @classmethod
    def from_dict(cls, data: Any, source: str = "<schedule>") -> Schedule:
        """Parse the contract's schedule JSON; structural errors raise :class:`ScheduleError`."""
        if not isinstance(data, Mapping):
            raise ScheduleError(f"{source}: the schedule must be a JSON object")
        unknown = sorted(set(data) - {"instance", "batches", "meta"})
        if unknown:
            raise ScheduleError(f"{source}: unknown field(s) {unknown} (free-form data goes in 'meta')")
        raw_batches = data.get("batches")
        if not isinstance(raw_batches, list):
            raise ScheduleError(f"{source}: field 'batches': must be a list")
        batches = [_parse_batch(b, j, source) for j, b in enumerate(raw_batches)]
        meta = data.get("meta") or {}
        if not isinstance(meta, Mapping):
            raise ScheduleError(f"{source}: field 'meta': must be an object")
        name = data.get("instance", "")
        if not isinstance(name, str):
            raise ScheduleError(f"{source}: field 'instance': must be a string (the instance's name)")
        return cls(name, tuple(batches), meta)


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
    if start is not None and abs(start) > MAX_ARRIVAL:
        raise ScheduleError(f"{where}: field 'start': must lie within +-{MAX_ARRIVAL:g} s (as arrivals), got {start!r}")
    return Batch(tuple(items), tuple(evict), None if start is None else float(start))


def load_schedule(path: str | Path) -> Schedule:
    """Read a schedule file, Parquet (``.parquet``) or JSON (:class:`ScheduleError` names the file
    and the field); its :class:`Batch` objects are built when a caller reads them."""
    with gc_paused():
        found = read_columns(path, ScheduleError)
        if found is not None:
            return Schedule(found[0], meta=found[1], columns=found[2])
        text = read_text(path, ScheduleError)
        return Schedule.from_dict(loads_json(text, str(path), ScheduleError), source=str(path))


# --------------------------------------------------------------------------- results


# --------------------------------------------------------------------------- replay


@dataclass(slots=True)
class _ReplayState:
    """Per-request state of a replay (lists in instance order) and its running totals."""

    index: dict[str, int]
    arrival: list[float]
    out_len: list[int]
    prompt: list[int]
    m: list[int]
    gen: list[int]
    finished: list[bool]
    first_token: list[float | None]
    finish: list[float | None]
    first_scheduled: list[float | None]
    evicted: list[int]
    kv_total: int = 0
    running: int = 0
    total_evictions: int = 0
    violations: list[str] = field(default_factory=list)
    dropped: int = 0

    @classmethod
    def of(cls, instance: Instance) -> _ReplayState:
        reqs = instance.requests
        n = len(reqs)
        return cls(
            index={r.id: i for i, r in enumerate(reqs)},
            arrival=[r.arrival for r in reqs],
            out_len=[r.output_tokens for r in reqs],
            prompt=[r.prompt_tokens for r in reqs],
            m=[0] * n,
            gen=[0] * n,
            finished=[False] * n,
            first_token=[None] * n,
            finish=[None] * n,
            first_scheduled=[None] * n,
            evicted=[0] * n,
        )

    def flag(self, msg: str) -> None:
        """Record a violation (the first :data:`MAX_VIOLATIONS`, then a count)."""
        if len(self.violations) < MAX_VIOLATIONS:
            self.violations.append(msg)
        else:
            self.dropped += 1


def _batch_start(st: _ReplayState, j: int, batch: Batch, prev_end: float) -> float:
    """Rule 1: the batch starts at max(previous end, its ``start``); an earlier ``start`` is flagged."""
    if batch.start is None:
        return prev_end
    if batch.start < prev_end - TIME_RTOL * max(1.0, abs(prev_end)):
        before = f"the previous batch's end {prev_end!r}" if j else "time 0"
        st.flag(f"batch {j}: start {batch.start!r} is earlier than {before}")
    return max(prev_end, batch.start)


def _apply_evictions(st: _ReplayState, j: int, batch: Batch, start: float, arrival_limit: float) -> None:
    """Rule 2: an evicted decode-phase request's prompt becomes ``m + 1``; its KV is dropped."""
    m, prompt = st.m, st.prompt
    for rid in batch.evict:
        i = st.index.get(rid)
        if i is None:
            st.flag(f"batch {j}: request {rid!r}: unknown request in evict")
            continue
        if st.arrival[i] > arrival_limit:
            st.flag(
                f"batch {j}: request {rid!r}: evicted before its arrival {st.arrival[i]!r} (batch starts {start!r})"
            )
        if st.finished[i]:
            st.flag(f"batch {j}: request {rid!r}: evicted after it finished")
            continue
        if m[i] == 0:
            st.flag(f"batch {j}: request {rid!r}: evicted without holding KV")
            continue
        if m[i] >= prompt[i]:
            prompt[i] = m[i] + 1
        st.kv_total -= m[i]
        st.running -= 1
        m[i] = 0
        st.evicted[i] += 1
        st.total_evictions += 1


def _item_is_skipped(
    st: _ReplayState,
    j: int,
    it: Item,
    i: int | None,
    seen: set[int],
    evict: tuple[str, ...],
    start: float,
    arrival_limit: float,
) -> bool:
    """Rule 3's checks before an item's phase: flag each broken one; True when the item is skipped.

    An item of a request not yet arrived is flagged but processed, so that every violation is
    listed at once.
    """
    if i is None:
        st.flag(f"batch {j}: request {it.id!r}: unknown request")
        return True
    if i in seen:
        st.flag(f"batch {j}: request {it.id!r}: more than one item in the batch")
        return True
    seen.add(i)
    if it.id in evict:
        st.flag(f"batch {j}: request {it.id!r}: evicted and processed in the same batch")
        return True
    if st.finished[i]:
        st.flag(f"batch {j}: request {it.id!r}: processed after it finished")
        return True
    if st.arrival[i] > arrival_limit:
        st.flag(
            f"batch {j}: request {it.id!r}: processed before its arrival {st.arrival[i]!r} (batch starts {start!r})"
        )
    if it.tokens < 1:
        st.flag(f"batch {j}: request {it.id!r}: tokens = {it.tokens} < 1")
        return True
    return False


def _limit_caps(instance: Instance) -> tuple[int, int, float, float]:
    """The limits ``(C, P, M, R_max)`` of rule 4 (an absent M or R_max is infinite)."""
    lim = instance.limits
    return (
        lim.token_budget,
        lim.prefill_budget,
        lim.kv_capacity if lim.kv_capacity is not None else math.inf,
        lim.max_running if lim.max_running is not None else math.inf,
    )


def _flag_limits(st: _ReplayState, j: int, n_tok: int, n_pre: int, seen: set[int], instance: Instance) -> None:
    """Rule 4, when broken: flag each of C, P, M and R_max exceeded after processing."""
    cap_c, cap_p, cap_m, cap_r = _limit_caps(instance)
    over = [
        (n_tok > cap_c, f"token budget exceeded: {n_tok} > C = {cap_c}"),
        (n_pre > cap_p, f"prefill budget exceeded: {n_pre} > P = {cap_p}"),
        (st.kv_total > cap_m, f"KV capacity exceeded: {st.kv_total} > M = {cap_m}"),
        (st.running > cap_r, f"max running exceeded: {st.running} > R_max = {cap_r}"),
    ]
    reqs = instance.requests
    ids = ", ".join(repr(reqs[i].id) for i in sorted(seen)[:5])
    who = f" (requests {ids}{'...' if len(seen) > 5 else ''})"
    for broken, what in over:
        if broken:
            st.flag(f"batch {j}: {what}{who}")


def _check_replay_arguments(instance: object, schedule: object) -> None:
    """What :func:`replay` takes: files are read first (``load_instance``, ``load_schedule``)."""
    if not isinstance(instance, Instance):
        raise TypeError(f"instance: an Instance (optsched.load_instance reads one), got {type(instance).__name__}")
    if isinstance(schedule, Schedule):
        return
    if isinstance(schedule, (str, bytes)) or not isinstance(schedule, Sequence):
        raise TypeError(f"schedule: a Schedule or a sequence of Batch, got {type(schedule).__name__}")
    if not all(isinstance(b, Batch) for b in schedule):
        raise TypeError("schedule: a sequence of Batch holds something else (optsched.load_schedule reads a file)")


def replay(instance: Instance, schedule: Schedule | Sequence[Batch], *, compiled: bool | None = None) -> ReplayResult:
    """Apply the contract's semantics to a schedule and judge it.

    Parameters
    ----------
    instance
        The instance scheduled.
    schedule
        A :class:`Schedule` or a bare sequence of batches.
    compiled
        True: the compiled kernel (:mod:`optsched.fastreplay`; a violation is then replayed here for
        its messages); False: the readable rules below; None: as :func:`optsched.tiering.use_compiled` decides.

    Returns
    -------
    ReplayResult
        Violations (each naming batch and request), per-request outcomes, per-batch trace and, when
        feasible, the metrics.

    Raises
    ------
    TypeError
        When ``instance`` is not an Instance, or ``schedule`` neither a Schedule nor batches.
    """
    _check_replay_arguments(instance, schedule)
    sched = schedule if isinstance(schedule, Schedule) else Schedule(instance.name, schedule)
    cols = sched._columns  # noqa: SLF001 - the same module's class
    n_items = len(cols.item_ref) if cols is not None else sum(len(b.items) for b in sched.batches)
    if use_compiled("replay", n_items, compiled):
        from .fastreplay import replay_columns  # deferred: the kernel loads at the first compiled replay

        try:
            compiled_result = replay_columns(instance, sched.columns())
        except OverflowError:  # a token count beyond 64 bits: a violation the rules below name
            compiled_result = None
        if compiled_result is not None:
            return compiled_result
    batches = sched.batches
    st = _ReplayState.of(instance)
    result = ReplayResult(False, st.violations, {}, [], [], [], [], [], [], None)
    makespan = _run_batches(instance, st, batches, result)
    return _conclude(instance, st, result, makespan, len(batches))


def _run_batches(instance: Instance, st: _ReplayState, batches: Sequence[Batch], result: ReplayResult) -> float:
    """Rules 1-6 over every batch, appending the per-batch trace to ``result``; returns the last end.

    This loop runs once per engine iteration, so a legal batch costs no call but the cost model's:
    the rules' checks are inline and only a broken rule (:func:`_item_is_skipped`,
    :func:`_flag_limits`), an explicit start (:func:`_batch_start`) or an eviction
    (:func:`_apply_evictions`) calls out. Rule 3 processes an item as a prefill chunk
    ``1 <= c <= I - m`` (completing the prompt generates a token) or a decode step ``c = 1``.
    """
    cap_c, cap_p, cap_m, cap_r = _limit_caps(instance)
    batch_time = instance.cost_model.batch_time
    index, arrival, prompt, m, flag = st.index, st.arrival, st.prompt, st.m, st.flag
    gen, out_len, finished = st.gen, st.out_len, st.finished
    first_token, finish, first_scheduled = st.first_token, st.finish, st.first_scheduled
    kv_used, running, prefill_tokens = result.kv_used.append, result.running.append, result.prefill_tokens.append
    decode_items, features_of, starts, ends = (
        result.decode_items.append,
        result.features.append,
        result.starts.append,
        result.ends.append,
    )
    prev_end = 0.0
    for j, batch in enumerate(batches):
        start = prev_end if batch.start is None else _batch_start(st, j, batch, prev_end)
        arrival_limit = start + TIME_RTOL * max(1.0, abs(start))
        evict = batch.evict
        if evict:
            _apply_evictions(st, j, batch, start, arrival_limit)
        n_tok = n_pre = s_pre = n_dec = kv_dec = x_pre = kv_max = 0
        seen: set[int] = set()
        generated: list[int] = []
        for it in batch.items:
            i = index.get(it.id)
            c = it.tokens
            if (
                i is None
                or i in seen
                or finished[i]
                or arrival[i] > arrival_limit
                or c < 1
                or (evict and it.id in evict)
            ):
                if _item_is_skipped(st, j, it, i, seen, evict, start, arrival_limit):
                    continue
            else:
                seen.add(i)
            held = m[i]
            if held < prompt[i]:  # prefill
                room = prompt[i] - held
                if c > room:
                    flag(f"batch {j}: request {it.id!r}: prefill chunk {c} exceeds the remaining prompt {room}")
                    continue
                if held == 0:
                    st.running += 1
                x_pre += c * held
                n_pre += c
                s_pre += c * c
                if c == room:
                    generated.append(i)
            else:  # decode
                if c != 1:
                    flag(f"batch {j}: request {it.id!r}: decode item with tokens = {c} (must be 1)")
                    continue
                kv_dec += held
                if held > kv_max:
                    kv_max = held
                n_dec += 1
                generated.append(i)
            m[i] = held + c
            n_tok += c
            if first_scheduled[i] is None:
                first_scheduled[i] = start
        st.kv_total += n_tok
        if n_tok > cap_c or n_pre > cap_p or st.kv_total > cap_m or st.running > cap_r:  # rule 4
            _flag_limits(st, j, n_tok, n_pre, seen, instance)
        features = (n_tok, n_pre, s_pre, n_dec, kv_dec, x_pre, kv_max)
        end = start + batch_time(*features)  # rule 6
        kv_used(st.kv_total)
        running(st.running)
        prefill_tokens(n_pre)
        decode_items(n_dec)
        features_of(features)
        for i in generated:  # rule 5: a token at the batch end; finished requests free their KV
            gen[i] += 1
            if first_token[i] is None:
                first_token[i] = end
            if gen[i] == out_len[i]:
                finished[i] = True
                finish[i] = end
                st.kv_total -= m[i]
                st.running -= 1
                m[i] = 0
        starts(start)
        ends(end)
        prev_end = end
    return prev_end


def _conclude(
    instance: Instance, st: _ReplayState, result: ReplayResult, makespan: float, batches: int
) -> ReplayResult:
    """Flag unfinished requests, build the outcomes and, when feasible, the metrics."""
    for i, r in enumerate(instance.requests):
        if not st.finished[i]:
            st.flag(
                f"request {r.id!r}: unfinished after the last batch ({st.gen[i]} of {st.out_len[i]} tokens generated)"
            )
    if st.dropped:
        st.violations.append(f"... and {st.dropped} more violations")
    result.outcomes = {
        r.id: RequestOutcome(r, st.first_token[i], st.finish[i], st.evicted[i], st.first_scheduled[i])
        for i, r in enumerate(instance.requests)
    }
    result.feasible = not st.violations
    if result.feasible:
        result.metrics = compute_metrics(result.outcomes.values(), makespan, st.total_evictions, batches)
    result.generated = st.gen
    result.kv_held = st.m
    return result


def item_phases(instance: Instance, schedule: Schedule) -> list[list[bool]]:
    """Per batch, per item: True when the item is a prefill chunk, False when it is a decode step.

    Follows the rules 2-3 of :func:`replay` for the state (m, I) only: a request is in prefill
    while m < I; an eviction of a decode-phase request sets I := m + 1, then m := 0. The schedule
    must replay cleanly (``tests/report/test_report.py`` checks the phases against replay's per-batch
    ``prefill_tokens`` and ``decode_items``).
    """
    m = {r.id: 0 for r in instance.requests}
    prompt = {r.id: r.prompt_tokens for r in instance.requests}
    out_len = {r.id: r.output_tokens for r in instance.requests}
    gen = dict.fromkeys(m, 0)
    phases: list[list[bool]] = []
    for batch in schedule.batches:
        for rid in batch.evict:
            if m[rid] >= prompt[rid]:
                prompt[rid] = m[rid] + 1
            m[rid] = 0
        row = []
        for it in batch.items:
            pre = m[it.id] < prompt[it.id]
            row.append(pre)
            m[it.id] += it.tokens
            if not pre or m[it.id] == prompt[it.id]:
                gen[it.id] += 1
                if gen[it.id] == out_len[it.id]:
                    m[it.id] = 0
        phases.append(row)
    return phases
