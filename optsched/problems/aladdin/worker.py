"""One worker's iteration-level engine for the multi-worker simulator (vLLM v0 default mode).

Each iteration is either a prefill batch or a decode batch, never both (seed002 Sec. 3.1; digest
Sec. 12): waiting requests are admitted first-come-first-served while their whole prompt fits the
token budget ``C`` and the free KV slots (a prompt longer than ``C`` is prefilled alone in chunks of
``C``); when none can be admitted, all running requests decode one token. Prefill therefore preempts
decode. When a decode step would overflow the KV capacity, the most recently admitted running request
is evicted (recomputation: it returns to the head of the queue with prompt ``m + 1``, contract
section 2). The engine emits contract batches (with ``start`` where it idles), so its schedule is
judged by :func:`optsched.schedule.replay` on the worker's sub-instance.

This is the core engine's ``vllm`` policy (:mod:`optsched.policies.engine`): a test checks that both
emit the same batches on random instances. The router uses this small engine instead of the core
one because the placement's prefill-preemption constraint (d) needs each request's first-token
time (its decode time so far), which the core engine's snapshot does not expose; the interface
mirrors the core ``Engine`` (``add_request``, ``advance``, ``snapshot``, ``schedule``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...costmodel import CostModel
from ...instance import Limits, Request
from ...schedule import Batch, Item

__all__ = ["WorkerEngine", "RequestState"]


@dataclass
class RequestState:
    """Engine-side state of one request (contract variables ``m``, ``I``, ``g``)."""

    request: Request
    added: float
    prompt: int
    m: int = 0
    g: int = 0
    first_token: float | None = None
    finish: float | None = None
    admitted_seq: int = -1

    @property
    def done(self) -> bool:
        return self.finish is not None


class WorkerEngine:
    """vLLM-style continuous batching on one worker.

    Parameters
    ----------
    cost
        Iteration cost model.
    limits
        Token budget ``C`` (and ``P``), KV capacity ``M`` in token slots, ``R_max``.
    """

    def __init__(self, cost: CostModel, limits: Limits) -> None:
        self.cost = cost
        self.limits = limits
        self.clock = 0.0
        self.batches: list[Batch] = []
        self.states: dict[str, RequestState] = {}
        self.waiting: list[RequestState] = []
        self.running: list[RequestState] = []
        self.kv_used = 0
        self._seq = 0
        self._generated: list[RequestState] = []

    # ---------------------------------------------------------------- interface

    def add_request(self, request: Request, now: float) -> None:
        """Deliver a request at time ``now`` (>= its arrival); it joins the waiting queue."""
        st = RequestState(request, now, request.prompt_tokens)
        self.states[request.id] = st
        self.waiting.append(st)

    def advance(self, until: float) -> None:
        """Run every iteration that starts before ``until``."""
        while self.waiting or self.running:
            start = max(self.clock, min((s.added for s in self.waiting), default=self.clock))
            if self.running:
                start = self.clock
            if start >= until:
                return
            self._step(start)

    def drain(self) -> None:
        """Run until every delivered request has finished."""
        self.advance(float("inf"))

    def snapshot(self) -> list[RequestState]:
        """Unfinished requests on the worker (waiting and running)."""
        return [s for s in self.states.values() if not s.done]

    def schedule(self) -> list[Batch]:
        """The batches emitted so far."""
        return list(self.batches)

    # ---------------------------------------------------------------- internals

    def _capacity(self) -> float:
        return self.limits.kv_capacity if self.limits.kv_capacity is not None else float("inf")

    def _step(self, start: float) -> None:
        ready = [s for s in self.waiting if s.added <= start]
        batch = self._prefill(ready) or self._decode()
        if batch is None:  # nothing runnable now: wait for the next delivery
            later = [s.added for s in self.waiting if s.added > start]
            if not later:
                raise RuntimeError("worker engine stuck: waiting requests can never be admitted")
            self.clock = min(later)
            return
        items, n_pre, s_pre, n_dec, kv_dec, evict = batch
        explicit = start if start > self.clock else None
        self.batches.append(Batch(tuple(items), tuple(evict), explicit))
        end = start + self.cost.batch_time(n_pre + n_dec, n_pre, s_pre, n_dec, kv_dec)
        self._finish_tokens(end)
        self.clock = end

    def _prefill(self, ready: list[RequestState]):
        lim = self.limits
        budget = min(lim.token_budget, lim.prefill_budget)
        free = self._capacity() - self.kv_used
        max_run = lim.max_running if lim.max_running is not None else float("inf")
        chosen: list[tuple[RequestState, int]] = []
        used = 0
        n_run = len(self.running)
        for st in ready:
            need = st.prompt - st.m
            if need > free or (st.m == 0 and n_run + 1 > max_run):
                break  # FCFS: the head blocks the queue
            if used + need > budget:
                if not chosen:  # an over-long prompt is prefilled alone in chunks of C
                    chosen.append((st, budget))
                    used = budget
                break
            chosen.append((st, need))
            used += need
            free -= need
            n_run += st.m == 0
        if not chosen:
            return None
        items = []
        s_pre = 0
        for st, chunk in chosen:
            if st.m == 0:
                st.admitted_seq = self._seq
                self._seq += 1
            st.m += chunk
            self.kv_used += chunk
            items.append(Item(st.request.id, chunk))
            s_pre += chunk * chunk
            if st.m == st.prompt:
                self.waiting.remove(st)
                self.running.append(st)
                st.g += 1
                self._generated.append(st)
        return items, used, s_pre, 0, 0, []

    def _decode(self):
        if not self.running:
            return None
        evict = []
        cap = self._capacity()
        while self.running and self.kv_used + len(self.running) > cap:
            victim = max(self.running, key=lambda s: s.admitted_seq)
            self.running.remove(victim)
            self.kv_used -= victim.m
            victim.prompt = victim.m + 1
            victim.m = 0
            self.waiting.insert(0, victim)
            evict.append(victim.request.id)
        if not self.running:
            return ([], 0, 0, 0, 0, evict) if evict else None
        kv_dec = 0
        items = []
        for st in self.running:
            kv_dec += st.m
            st.m += 1
            st.g += 1
            items.append(Item(st.request.id, 1))
            self._generated.append(st)
        self.kv_used += len(self.running)
        return items, 0, 0, len(items), kv_dec, evict

    def _finish_tokens(self, end: float) -> None:
        for st in self._generated:
            if st.first_token is None:
                st.first_token = end
            if st.g >= st.request.output_tokens:
                st.finish = end
                self.kv_used -= st.m
                st.m = 0
                if st in self.running:
                    self.running.remove(st)
        self._generated = []
