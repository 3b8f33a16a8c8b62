"""The unified scheduler of InferMax (Algorithm 1) with online arrivals, for every baseline policy.

One engine runs every policy of :mod:`optsched.policies.config` (vLLM, Sarathi and their variants,
the ranking schedulers, each with its eviction-free twin); the policies differ only in data.

Algorithm (docs/policies.md, Algorithm 1 and decisions B1-B11)
----------------------------------------------------------
The engine keeps R_w (waiting: arrived requests holding no KV) and R_r (running: requests holding
KV). Each iteration starts at the end of the previous one, or at the next arrival when both queues
are empty (the batch then carries an explicit ``start``). Requests that arrived by then join R_w.
GetNextBatch walks the policy's candidate groups in order, each in the policy's priority order
(:func:`.orders.order_key`; a dynamic key is recomputed for R_r before every batch); for each
candidate:

1. *Hybrid check.* Without hybrid batching a candidate whose phase (prefill: m < I, decode:
   m >= I) differs from the batch's is skipped.
2. *Budget.* A decode takes 1 token and needs C - N_tok >= 1. A prefill may take up to
   room = min(C - N_tok, P - N_tok) tokens (B4: P counts the decode tokens already in the batch;
   ``prefill_counts_decodes=False`` counts prefill tokens only). With chunked prefill it takes
   min(remaining prompt, room); without, the whole remaining prompt must fit. A prompt longer than
   P can never fit whole, so a non-chunked policy chunks it (decision where the paper is silent).
   With ``prefill_share`` the room's P is the batch's adaptive budget P_b (:mod:`.share`).
3. *R_max.* Admitting a request from R_w needs fewer than R_max running requests; with
   ``kv_lookahead`` (MC-SF) also the KV look-ahead test of :func:`.orders.lookahead_fits`.
4. *KV.* The engine reserves KV: a request admitted from R_w reserves its full current prompt I
   (B6; the eviction-free variants reserve I + O - g - 1, i.e. I + O - 1), a decode step one more
   slot (none for eviction-free). Reservations never exceed M, and every request's KV ``m`` stays
   within its reservation, so the contract's ``sum m <= M`` holds. With ``kv_block`` b > 1 (vLLM's
   paged KV) every reservation is rounded up to whole blocks of b slots and M down to floor(M / b)
   blocks, so a decode reserves a new block only when its request's KV fills its last one; with
   ``kv_watermark`` w a waiting request admitted while others run must leave w blocks free.
5. *Failure.* Waiting candidates are admitted in priority order up to the first failure, for any
   reason (B2: in the FCFS ``waiting`` group this ends the group; in the ranked ``all`` group the
   later waiting candidates are passed over). A failed running candidate is skipped. A running
   candidate short of KV evicts running requests of lower priority that are not in the batch,
   lowest first (B3: for FCFS policies the latest-arrived); when they cannot free enough it evicts
   itself (vLLM recompute). A waiting
   candidate evicts only when the policy says so (ranking schedulers). Evicted requests take no
   item in that batch and go to the front of R_w (B1); a decode-phase victim's prompt becomes
   m + 1 (docs/schedule.md, rule 2). Eviction-free policies never evict.

After the batch, requests whose prompt completed or that decoded generate a token; those that
reached their output length finish and release their reservation (B10). Every schedule produced
here replays cleanly with :func:`optsched.schedule.replay` (the tests check every policy).

Engine API (incremental, for multi-worker simulators): :class:`Engine`'s methods and docs/policies.md
(``add_request``, ``advance``, ``now``, ``snapshot``, ``request_state``, ``done``, ``schedule``,
``instance``).

``simulate(instance, policy)`` runs an instance to completion; :func:`optsched.policies.simulator_for`
binds a policy's name to it (``simulator_for("vllm")(instance)``).
"""

from __future__ import annotations

import heapq
import math
from bisect import insort
from collections import deque
from dataclasses import dataclass, field

from ..costmodel import CostModel
from ..instance import Instance, InstanceError, Limits, Request
from ..schedule import Batch, Item, Schedule
from ..tiering import use_compiled
from .config import PolicyConfig, policy_config
from .orders import DYNAMIC_ORDERS, lookahead_fits, order_key, projection
from .share import batch_prefill_budget
from .slo import fit_chunk, fits_decode, late_last, resolve, resolved, sheds
from .slo_lazy import mark_optional
from .states import EngineSnapshot, RequestState

__all__ = ["Engine", "EngineSnapshot", "RequestState", "simulate"]

_NONE, _PRE, _DEC = 0, 1, 2  # phase of the batch being built
#: Batches without any generated token, beyond which the engine checks for a livelock.
_STALL_CHECK = 1000


@dataclass(slots=True)
class _Draft:
    """The batch being built: its items and the cost-model counters."""

    no: int
    items: list[Item] = field(default_factory=list)
    evict: list[str] = field(default_factory=list)
    generated: list[int] = field(default_factory=list)
    n_tok: int = 0
    n_pre: int = 0
    s_pre: int = 0
    n_dec: int = 0
    kv_dec: int = 0
    x_pre: int = 0
    kv_max: int = 0
    phase: int = _NONE
    cut: bool = False  # prefill chunks cut to the time budget without decodes in the batch (.slo_lazy)
    p: int = 0  # the batch's prefill budget: P, or the adaptive share's (.share)


class Engine:
    """One worker running a baseline policy; see the module docstring for the algorithm and API.

    Parameters
    ----------
    limits
        C, P, M and R_max of the worker.
    cost_model
        Iteration cost model giving batch times.
    policy
        A policy name of :data:`~optsched.policies.config.POLICY_CONFIGS` or a :class:`PolicyConfig`.
    name
        Instance name written into the schedule.
    """

    def __init__(self, limits: Limits, cost_model: CostModel, policy: str | PolicyConfig, *, name: str = "engine"):
        self.config = resolved(policy_config(policy))
        self.limits = limits
        self.cost_model = cost_model
        self.name = name
        self._C = limits.token_budget
        self._P = min(self.config.chunk or limits.prefill_budget, limits.prefill_budget)
        self._b = self.config.kv_block
        self._watermark = self.config.kv_watermark * self._b  # slots kept free when admitting beside others
        # KV in whole blocks of kv_block tokens: at most floor(M / kv_block) of them
        self._M = limits.kv_capacity // self._b * self._b if limits.kv_capacity is not None else math.inf
        self._R = limits.max_running if limits.max_running is not None else math.inf
        self._ef = self.config.eviction_free
        # per request (engine index i)
        self._reqs: list[Request] = []
        self._index: dict[str, int] = {}
        self._prio: list[tuple] = []
        self._dec_item: list[Item] = []
        self._m: list[int] = []
        self._prompt: list[int] = []
        self._gen: list[int] = []
        self._fixed: list[int] = []  # eviction-free reservation (0 otherwise)
        self._mark: list[int] = []  # number of the batch the request is in (or was evicted from)
        self._first: list[float | None] = []  # end of the batch of the first token
        self._end: list[float | None] = []  # end of the batch of the last token
        self._shed: list[bool] = []  # decodes deferred (tpot_shed, .slo)
        self._skip: list[bool] = []  # decodes after the prefill in the next batch (tpot_shed, tpot_lazy)
        self._lazy = (self._m, self._prompt, self._gen, self._first, self._reqs, self._shed)  # .slo_lazy reads
        # queues
        self._pending: list[tuple[float, int]] = []  # heap of (arrival, i), not yet arrived
        self._fcfs_waiting = "all" not in self.config.groups and self.config.order == "arrival"  # else sorted
        self._dynamic = self.config.order in DYNAMIC_ORDERS
        self._lookahead = self.config.kv_lookahead and not self._ef and self._M < math.inf
        self._waiting: deque[int] | list[int] = deque() if self._fcfs_waiting else []
        self._running: list[int] = []  # sorted by priority
        self._kv_reserved = 0
        self._unfinished = 0
        self._batches: list[Batch] = []
        self._now = 0.0
        self._stall = 0

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_instance(cls, instance: Instance, policy: str | PolicyConfig) -> Engine:
        """An engine with the instance's limits and cost model, holding all its requests."""
        config = resolve(policy_config(policy), instance.requests, instance.cost_model)  # SLO-aware policies' SLOs
        engine = cls(instance.limits, instance.cost_model, config, name=instance.name)
        for r in instance.requests:
            engine.add_request(r)
        return engine

    def add_request(self, request: Request) -> None:
        """Queue a request; it joins R_w at the first batch starting at or after its arrival.

        Raises
        ------
        ValueError
            When the id was added before, or the request can never fit (I + O - 1 > M);
            :class:`~optsched.instance.InstanceError` (a ValueError) when it fits M but not the
            policy's whole KV blocks (``kv_block``).
        """
        if request.id in self._index:
            raise ValueError(f"request {request.id!r}: added twice")
        capacity = self.limits.kv_capacity
        if capacity is not None and request.max_kv > capacity:
            raise ValueError(
                f"request {request.id!r}: prompt_tokens + output_tokens - 1 = {request.max_kv} exceeds"
                f" kv_capacity = {capacity}; it can never finish"
            )
        if self._blocks(request.max_kv) > self._M:
            raise InstanceError(
                f"request {request.id!r}: prompt_tokens + output_tokens - 1 = {request.max_kv} needs"
                f" {self._blocks(request.max_kv) // self._b} KV blocks of {self._b} tokens, policy"
                f" {self.config.name!r} has {self._M // self._b}; it can never finish"
            )
        i = len(self._reqs)
        self._reqs.append(request)
        self._index[request.id] = i
        self._prio.append(())
        self._dec_item.append(Item(request.id, 1))
        self._m.append(0)
        self._prompt.append(request.prompt_tokens)
        self._gen.append(0)
        self._fixed.append(0)
        self._mark.append(0)
        self._first.append(None)
        self._end.append(None)
        self._shed.append(sheds(self.cost_model, self.config, request))
        self._skip.append(self._shed[-1])
        self._rekey(i)
        heapq.heappush(self._pending, (request.arrival, i))
        self._unfinished += 1

    def _rekey(self, i: int) -> None:
        """Request ``i``'s priority key from its current state (:func:`.orders.order_key`)."""
        r = self._reqs[i]
        key = order_key(self.config.order, self._prompt[i], self._m[i], r.prompt_tokens, r.output_tokens, r.arrival, i)
        self._prio[i] = key

    # ------------------------------------------------------------------ queries

    @property
    def now(self) -> float:
        """End time of the last batch (0.0 before the first)."""
        return self._now

    def done(self) -> bool:
        """Whether every added request has finished."""
        return self._unfinished == 0

    def schedule(self) -> Schedule:
        """The batches run so far, with the policy in ``meta``."""
        meta = {"policy": self.config.name, "policy_config": self.config.to_dict()}
        return Schedule(self.name, tuple(self._batches), meta)

    def instance(self) -> Instance:
        """The instance of the added requests that :meth:`schedule` replays against."""
        return Instance(self.name, self.cost_model, self.limits, tuple(self._reqs))

    def request_state(self, request_id: str) -> RequestState:
        """The state of any added request, finished ones included (KeyError for an unknown id)."""
        i = self._index[request_id]
        return self._state(i, i in self._running)

    def _state(self, i: int, running: bool) -> RequestState:
        r, held, first = self._reqs[i], self._held(i) if running else 0, self._first[i]
        return RequestState(
            r.id, r.arrival, r.output_tokens, self._prompt[i], self._m[i], self._gen[i], held, first, self._end[i]
        )

    def snapshot(self) -> EngineSnapshot:
        """The state between batches: time, KV and per-request states of R_r, R_w and the pending."""
        running = set(self._running)
        state = lambda i: self._state(i, i in running)  # noqa: E731 - local projection
        return EngineSnapshot(
            now=self._now,
            kv_used=sum(self._m[i] for i in self._running),
            kv_reserved=self._kv_reserved,
            running=tuple(state(i) for i in self._running),
            waiting=tuple(state(i) for i in self._waiting),
            pending=tuple(state(i) for _, i in sorted(self._pending)),
        )

    # ------------------------------------------------------------------ main loop

    def advance(self, until: float = math.inf) -> None:
        """Run every batch that starts before ``until``.

        Raises
        ------
        RuntimeError
            If the policy cannot make progress (a bug guard; the engine's rules always progress).
        """
        while True:
            start, explicit = self._now, False
            self._intake(start)
            if not self._waiting and not self._running:
                if not self._pending:
                    return
                start, explicit = max(start, self._pending[0][0]), True
                if start >= until:
                    return
                self._intake(start)
            elif start >= until:
                return
            self._step(start, explicit)

    def _intake(self, time: float) -> None:
        """Move requests that arrived by ``time`` into R_w (FCFS: to its tail, by arrival)."""
        pending, waiting = self._pending, self._waiting
        while pending and pending[0][0] <= time:
            _, i = heapq.heappop(pending)
            if self._fcfs_waiting:
                waiting.append(i)  # type: ignore[union-attr]
            else:
                insort(waiting, i, key=self._prio.__getitem__)  # type: ignore[arg-type]

    def _step(self, start: float, explicit: bool) -> None:
        """Build one batch at ``start`` (GetNextBatch), then process it."""
        d = _Draft(len(self._batches) + 1)
        if self._dynamic:  # the running requests' keys moved with their prefill chunks
            for i in self._running:
                self._rekey(i)
            self._running.sort(key=self._prio.__getitem__)
        d.p = self._batch_budget()
        if self.config.ttft_drop:  # late requests last (.slo)
            queues = (self._running, self._waiting, self._m, self._prompt, self._reqs, self._shed)
            late_last(self.cost_model, self.config, start, *queues)
        if self.config.tpot_lazy:  # optional decodes after the prefill (.slo_lazy)
            d.cut = mark_optional(self.config, start, self._running, self._waiting, self._skip, *self._lazy)
        for group in self.config.groups:
            if group == "waiting":
                self._fill_fcfs_waiting(d)
            else:
                self._fill_group(d, self._running_group(group), merge_waiting=group == "all")
        for i in [i for i in self._running if self._skip[i] and self._m[i] >= self._prompt[i]]:  # deferred, optional
            if self._mark[i] != d.no and fits_decode(self.cost_model, self.config.time_budget, d, self._m[i]):
                self._take_decodes(d, [i])
        if not d.items and not d.evict:
            raise RuntimeError(
                f"policy {self.config.name!r}: empty batch at t={start} with {len(self._waiting)} waiting and"
                f" {len(self._running)} running requests (engine bug)"
            )
        end = start + self.cost_model.batch_time(d.n_tok, d.n_pre, d.s_pre, d.n_dec, d.kv_dec, d.x_pre, d.kv_max)
        self._batches.append(Batch(tuple(d.items), tuple(d.evict), start if explicit else None))
        self._now = end
        self._finish(d)

    def _batch_budget(self) -> int:
        """The prefill budget of the batch being built: P, or P_b of the adaptive share (:mod:`.share`)."""
        share = self.config.prefill_share
        if share is None:
            return self._P
        decoding = sum(1 for i in self._running if self._m[i] >= self._prompt[i])
        waiting = len(self._waiting) + len(self._running) - decoding
        tile = self.config.share_tile(self.cost_model.token_tile)
        return batch_prefill_budget(self._P, share, tile, waiting, decoding)

    def _running_group(self, group: str) -> list[int]:
        """Snapshot of a running group's candidates (R_r, or one phase of it) in priority order."""
        m, prompt, mark, no = self._m, self._prompt, self._mark, len(self._batches) + 1
        if group == "running_decode":
            return [i for i in self._running if m[i] >= prompt[i] and mark[i] != no and not self._skip[i]]
        if group == "running_prefill":
            return [i for i in self._running if m[i] < prompt[i] and mark[i] != no]
        return [i for i in self._running if mark[i] != no]

    def _fill_fcfs_waiting(self, d: _Draft) -> None:
        """R_w in FCFS order, stopping at the first candidate that cannot be admitted (B2).

        The candidate leaves R_w before its admission, which may evict running requests to the front of R_w
        (``evicted_to_front``); it goes back to the front when it is not admitted."""
        waiting = self._waiting
        while waiting:
            i = waiting[0]
            if self._mark[i] == d.no:
                return
            del waiting[0]
            if not self._take_prefill(d, i, admit=True):
                waiting.insert(0, i)
                return

    def _fill_group(self, d: _Draft, running: list[int], merge_waiting: bool) -> None:
        """Walk running candidates (merged with R_w by priority when ``merge_waiting``).

        Failed running candidates are skipped; R_w is admitted in priority order up to its first failure
        (B2), after which only running candidates are considered. Consecutive decodes are taken in bulk."""
        m, prompt, mark, prio, no = self._m, self._prompt, self._mark, self._prio, d.no
        waiting = self._waiting if merge_waiting else []
        w = 0  # next waiting candidate; waiting[:w] were admitted
        blocked = False
        run: list[int] = []
        for i in running:
            while not blocked and w < len(waiting) and prio[waiting[w]] < prio[i]:
                if run:
                    self._take_decodes(d, run)
                    run = []
                cand = waiting[w]
                if mark[cand] == no or not self._take_prefill(d, cand, admit=True):
                    blocked = True
                else:
                    w += 1
            if mark[i] == no:  # evicted earlier in this batch
                continue
            if m[i] >= prompt[i]:
                run.append(i)
                continue
            if run:
                self._take_decodes(d, run)
                run = []
            if mark[i] != no:
                self._take_prefill(d, i, admit=False)
        if run:
            self._take_decodes(d, run)
        while not blocked and w < len(waiting):
            cand = waiting[w]
            if mark[cand] == no or not self._take_prefill(d, cand, admit=True):
                break
            w += 1
        del waiting[:w]

    # ------------------------------------------------------------------ candidates

    def _take_decodes(self, d: _Draft, run: list[int]) -> None:
        """Decode candidates in priority order: in bulk when KV and C allow, else one by one."""
        if not self.config.hybrid and d.phase == _PRE:
            return
        k = min(len(run), self._C - d.n_tok)
        if k <= 0:
            return
        need = 0 if self._ef else k if self._b == 1 else sum(map(self._decode_need, run[:k]))
        if self._kv_reserved + need <= self._M:
            self._add_decodes(d, run[:k])
            self._kv_reserved += need
            return
        for i in run:
            if self._C - d.n_tok < 1:
                return
            if self._mark[i] == d.no:
                continue
            step = self._decode_need(i)
            if self._kv_reserved + step > self._M and not self._make_room(d, i, step):
                self._evict(d, i)
                continue
            self._add_decodes(d, [i])
            self._kv_reserved += step

    def _add_decodes(self, d: _Draft, chosen: list[int]) -> None:
        m, mark, no = self._m, self._mark, d.no
        d.kv_dec += sum(map(m.__getitem__, chosen))
        top = d.kv_max
        for i in chosen:
            held = m[i]
            if held > top:
                top = held
            m[i] = held + 1
            mark[i] = no
        d.kv_max = top
        d.items.extend(map(self._dec_item.__getitem__, chosen))
        d.generated.extend(chosen)
        d.n_tok += len(chosen)
        d.n_dec += len(chosen)
        d.phase = _DEC

    def _take_prefill(self, d: _Draft, i: int, admit: bool) -> bool:
        """Add a prefill chunk of request ``i`` (admitting it from R_w when ``admit``)."""
        cfg = self.config
        if not cfg.hybrid and d.phase == _DEC:
            return False
        want = self._prompt[i] - self._m[i]
        used = d.n_tok if cfg.prefill_counts_decodes else d.n_pre
        room = min(self._C - d.n_tok, d.p - used)
        if cfg.chunked or want > self._P:
            c = min(want, room)
        else:
            c = want if want <= room else 0
        c = fit_chunk(self.cost_model, self.config.time_budget, d, c, self._m[i]) if self.config.time_budget else c
        if c <= 0:
            return False
        if admit:
            if len(self._running) >= self._R or (self._lookahead and not self._lookahead_fits(i)):
                return False
            need = self._blocks(self._prompt[i] + (self._reqs[i].output_tokens - self._gen[i] - 1 if self._ef else 0))
            room = need + (self._watermark if self._running else 0)  # free slots it needs (vLLM's watermark)
            if self._kv_reserved + room > self._M and not (cfg.evict_for_waiting and self._make_room(d, i, room)):
                return False
            self._kv_reserved += need
            if self._ef:
                self._fixed[i] = need
            insort(self._running, i, key=self._prio.__getitem__)
        d.x_pre += c * self._m[i]
        self._m[i] += c
        self._mark[i] = d.no
        d.items.append(Item(self._reqs[i].id, c))
        d.n_tok += c
        d.n_pre += c
        d.s_pre += c * c
        d.phase = _PRE
        if self._m[i] == self._prompt[i]:
            d.generated.append(i)
        return True

    # ------------------------------------------------------------------ KV and eviction

    def _held(self, i: int) -> int:
        """KV slots reserved for running request ``i`` (whole blocks)."""
        return self._fixed[i] if self._ef else self._blocks(max(self._m[i], self._prompt[i]))

    def _blocks(self, slots: int) -> int:
        """``slots`` rounded up to whole KV blocks (in slots)."""
        return -(-slots // self._b) * self._b

    def _decode_need(self, i: int) -> int:
        """KV slots a decode of running request ``i`` adds to the reservations: one slot, or with
        blocks a new block when its KV fills its last one (none for eviction-free policies)."""
        return 0 if self._ef else self._b if self._m[i] % self._b == 0 else 0

    def _lookahead_fits(self, i: int) -> bool:
        """MC-SF's test: the running requests and ``i`` fit at every future iteration (.orders)."""
        prompt, m, gen, reqs = self._prompt, self._m, self._gen, self._reqs
        out = [projection(prompt[j], m[j], reqs[j].output_tokens, gen[j]) for j in self._running]
        out.append(projection(prompt[i], 0, reqs[i].output_tokens, gen[i]))
        return lookahead_fits(out, self._M)

    def _make_room(self, d: _Draft, cand: int, need: int) -> bool:
        """Evict lower-priority running requests outside the batch until ``need`` slots are free.

        Evicts nothing (and returns False) when even all of them would not free enough.
        """
        if self._ef:
            return False
        deficit = self._kv_reserved + need - self._M
        victims: list[int] = []
        top = self._prio[cand]
        for v in reversed(self._running):
            if self._prio[v] <= top:
                break
            if self._mark[v] == d.no:
                continue
            victims.append(v)
            deficit -= self._held(v)
            if deficit <= 0:
                for victim in victims:
                    self._evict(d, victim)
                return True
        return False

    def _evict(self, d: _Draft, i: int) -> None:
        """Drop request ``i``'s KV (recomputation) and put it back into R_w (B1)."""
        self._kv_reserved -= self._held(i)
        if self._m[i] >= self._prompt[i]:
            self._prompt[i] = self._m[i] + 1
        self._m[i] = 0
        self._fixed[i] = 0
        self._mark[i] = d.no
        self._running.remove(i)
        d.evict.append(self._reqs[i].id)
        if not self._fcfs_waiting:
            if self._dynamic:
                self._rekey(i)
            insort(self._waiting, i, key=self._prio.__getitem__)  # type: ignore[arg-type]
        elif self.config.evicted_to_front:
            self._waiting.appendleft(i)  # type: ignore[union-attr]
        else:
            self._waiting.append(i)

    def _finish(self, d: _Draft) -> None:
        """Generate the batch's tokens; finished requests release their KV (B10)."""
        gen, reqs = self._gen, self._reqs
        finished = []
        for i in d.generated:
            gen[i] += 1
            if gen[i] == 1:
                self._first[i] = self._now
            if gen[i] == reqs[i].output_tokens:
                finished.append(i)
                self._end[i] = self._now
        if finished:
            done = set(finished)
            for i in finished:
                self._kv_reserved -= self._held(i)
                self._m[i] = 0
                self._fixed[i] = 0
            self._running = [i for i in self._running if i not in done]
            self._unfinished -= len(finished)
        self._check_stall(bool(d.generated))

    def _check_stall(self, progressed: bool) -> None:
        """Raise when batches keep coming without any token generated (a livelock guard)."""
        self._stall = 0 if progressed else self._stall + 1
        if self._stall > _STALL_CHECK:
            queued = list(self._waiting) + self._running
            bound = 1 + len(queued) + sum(self._prompt[i] for i in queued)
            if self._stall > bound:
                raise RuntimeError(
                    f"policy {self.config.name!r}: no token generated in {self._stall} batches (livelock)"
                )


def simulate(instance: Instance, policy: str | PolicyConfig, *, compiled: bool | None = None) -> Schedule:
    """Run ``policy`` on ``instance`` from time 0 until every request finished; the returned
    :class:`Schedule` replays cleanly with :func:`optsched.schedule.replay`.

    Parameters
    ----------
    instance
        The requests (with arrivals), limits and cost model.
    policy
        A registered policy name (e.g. ``"vllm"``, ``"sarathi-ef"``) or a :class:`PolicyConfig`.
    compiled
        True: the compiled engine (:mod:`.fastsim`, the same batches); False: this module's; None: as
        :func:`optsched.tiering.use_compiled` decides.
    """
    if use_compiled("simulate", int(instance.columns[2].sum()), compiled):
        from .fastsim import compiled_schedule  # deferred: the kernel loads at the first compiled run

        if (schedule := compiled_schedule(instance, policy_config(policy))) is not None:
            return schedule
    engine = Engine.from_instance(instance, policy)
    engine.advance()
    return engine.schedule()
