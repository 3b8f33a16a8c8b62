"""A replayed schedule as a Chrome / Perfetto trace (the trace-event JSON format).

Open the file in ``chrome://tracing`` or https://ui.perfetto.dev. Times are microseconds
(``ts``, ``dur``) of the replay's clock. Two processes:

- pid 1, ``schedule``: thread 0 holds one complete event (``ph: "X"``) per batch, from its
  replayed start to its end, named ``batch j: P prefill + D decode`` with the batch's token counts,
  evictions and KV use in ``args`` (its exact ``start`` and ``end`` in seconds too); counter events
  (``ph: "C"``) plot the KV slots in use and the running requests after each batch;
- pid 2, ``requests``: one thread per request (instance order), with ``queued`` from its arrival to
  the start of its first batch, its ``prefill`` and ``decode`` runs (consecutive batches of one
  phase merged; ``args.batches`` counts them) and instant events (``ph: "i"``) for its first token
  and each eviction.

Only a schedule that replays cleanly is exported.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..instance import Instance
from ..schedule import ReplayResult, Schedule, item_phases, replay
from .vllm_replay import PlanError

__all__ = ["export", "trace_events"]

US = 1e6
BATCH_PID, REQUEST_PID = 1, 2


def _meta(pid: int, tid: int | None, kind: str, name: str) -> dict[str, Any]:
    event: dict[str, Any] = {"name": kind, "ph": "M", "pid": pid, "args": {"name": name}}
    if tid is not None:
        event["tid"] = tid
    return event


def _batch_events(schedule: Schedule, result: ReplayResult) -> list[dict[str, Any]]:
    events = []
    for j, batch in enumerate(schedule.batches):
        start, end = result.starts[j], result.ends[j]
        n_pre, n_dec = result.prefill_tokens[j], result.decode_items[j]
        events.append({
            "name": f"batch {j}: {n_pre} prefill + {n_dec} decode",
            "cat": "batch",
            "ph": "X",
            "ts": start * US,
            "dur": (end - start) * US,
            "pid": BATCH_PID,
            "tid": 0,
            "args": {
                "batch": j,
                "start": start,
                "end": end,
                "tokens": n_pre + n_dec,
                "prefill_tokens": n_pre,
                "decode_items": n_dec,
                "items": len(batch.items),
                "evicted": list(batch.evict),
                "kv_used": result.kv_used[j],
                "running": result.running[j],
            },
        })
        events.append({
            "name": "KV slots",
            "ph": "C",
            "ts": start * US,
            "pid": BATCH_PID,
            "args": {"kv_used": result.kv_used[j]},
        })
        events.append({
            "name": "running",
            "ph": "C",
            "ts": start * US,
            "pid": BATCH_PID,
            "args": {"running": result.running[j]},
        })
    return events


def _request_events(instance: Instance, schedule: Schedule, result: ReplayResult) -> list[dict[str, Any]]:
    tid = {r.id: k + 1 for k, r in enumerate(instance.requests)}
    runs: dict[str, list[dict[str, Any]]] = {r.id: [] for r in instance.requests}
    last: dict[str, tuple[int, bool]] = {}
    events: list[dict[str, Any]] = []
    for j, (batch, phases) in enumerate(zip(schedule.batches, item_phases(instance, schedule))):
        start, end = result.starts[j], result.ends[j]
        for rid in batch.evict:
            events.append({
                "name": "evicted",
                "cat": "request",
                "ph": "i",
                "s": "t",
                "ts": start * US,
                "pid": REQUEST_PID,
                "tid": tid[rid],
                "args": {"batch": j},
            })
        for item, prefill in zip(batch.items, phases):
            mine = runs[item.id]
            if last.get(item.id) == (j - 1, prefill):
                run = mine[-1]
                run["dur"] = end * US - run["ts"]
                run["args"]["batches"] += 1
                run["args"]["tokens"] += item.tokens
            else:
                mine.append({
                    "name": "prefill" if prefill else "decode",
                    "cat": "request",
                    "ph": "X",
                    "ts": start * US,
                    "dur": (end - start) * US,
                    "pid": REQUEST_PID,
                    "tid": tid[item.id],
                    "args": {"batches": 1, "tokens": item.tokens, "first_batch": j},
                })
            last[item.id] = (j, prefill)
    for r in instance.requests:
        o = result.outcomes[r.id]
        if o.first_scheduled is not None and o.first_scheduled > r.arrival:
            events.append({
                "name": "queued",
                "cat": "request",
                "ph": "X",
                "ts": r.arrival * US,
                "dur": (o.first_scheduled - r.arrival) * US,
                "pid": REQUEST_PID,
                "tid": tid[r.id],
                "args": {"arrival": r.arrival, "queue": o.queue},
            })
        if o.first_token is not None:
            events.append({
                "name": "first token",
                "cat": "request",
                "ph": "i",
                "s": "t",
                "ts": o.first_token * US,
                "pid": REQUEST_PID,
                "tid": tid[r.id],
                "args": {"ttft": o.ttft},
            })
        events.extend(runs[r.id])
    return events


def trace_events(instance: Instance, schedule: Schedule, result: ReplayResult) -> list[dict[str, Any]]:
    """Every event of the trace: metadata, the batch track, the counters and the request tracks."""
    events = [
        _meta(BATCH_PID, None, "process_name", f"schedule of {instance.name}"),
        _meta(BATCH_PID, 0, "thread_name", "batches"),
        _meta(REQUEST_PID, None, "process_name", "requests"),
    ]
    for k, r in enumerate(instance.requests):
        events.append(_meta(REQUEST_PID, k + 1, "thread_name", r.id))
        events.append({
            "name": "thread_sort_index",
            "ph": "M",
            "pid": REQUEST_PID,
            "tid": k + 1,
            "args": {"sort_index": k + 1},
        })
    events += _batch_events(schedule, result)
    events += _request_events(instance, schedule, result)
    return events


def export(instance: Instance, schedule: Schedule, options: Mapping[str, Any]) -> dict[str, Any]:
    """Registry entry (``--format chrome-trace``); no options. A schedule with violations is refused."""
    unused = sorted(k for k, v in options.items() if v is not None)
    if unused:
        raise PlanError(f"chrome-trace takes no option ({', '.join(unused)} given)")
    result = replay(instance, schedule)
    if not result.feasible:
        raise PlanError(f"the schedule does not replay cleanly: {result.violations[0]}")
    assert result.metrics is not None
    return {
        "traceEvents": trace_events(instance, schedule, result),
        "displayTimeUnit": "ms",
        "otherData": {
            "instance": instance.name,
            "requests": len(instance.requests),
            "batches": len(schedule.batches),
            "makespan": result.metrics.makespan,
            "meta": dict(schedule.meta),
        },
    }
