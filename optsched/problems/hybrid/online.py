"""Online methods of the Hybrid paper as simulation policies under PD Competition (seed003 Sec. IV-C).

The simulator runs ``J`` clients (``limits.max_running``); each client holds at most one request at a time
and keeps it from its prefill to its last decode round (no client-level preemption, paper setting 4). Every
iteration is a pure batch: a **prefill stage** (prompt tokens of waiting requests, at most
``P = min(prefill_budget, token_budget)`` tokens) or a **decode round** (one token for every decoding
request). No hybrid batches, no evictions. By default a prompt is prefilled whole in one stage (the paper's
"each request is assigned to exactly one prefill stage"; only a prompt longer than P is split), so the
policies' schedules lie in the full MIP's model space. Every caller replays the schedule with
:func:`optsched.schedule.replay`.

Three decisions, each with the paper's options:

1. *Assignment* of requests to client queues ``I_j``: round robin in arrival (FCFS) order (the baseline,
   docs/hybrid.md, "Online methods"), the offline P||Cmax optimum (:mod:`.pcmax`, Eqs. 26-30), or one
   shared FCFS queue that every idle client serves next (``hybrid-baseline-global``, vLLM's single waiting queue; a
   variant the paper does not describe, reported beside that baseline).
2. *Online request scheduling* (Algorithm 1 with fixes A1-A2 of docs/hybrid.md): each ``I_j`` sorted longest-first
   by ``N^p_i + N^d_i``; ``remain_token(j) = sum_{I_j} (N^p + N^d)``; an idle client with an empty queue
   steals the head (longest) request of ``j* = argmax remain_token`` (lowest index on ties) and the donor's
   counter drops. Without it, a client serves its own queue in order (FCFS).
3. *Online iteration scheduling*: ``prefill-first`` (baseline: a prefill stage whenever a request waits) or
   the marginal-cost rule of Eqs. (41)-(43) (docs/hybrid.md, fix A4): ``C_p`` = time of the prefill stage that
   would run now, ``C_d`` = "waited decode time" since the last prefill stage; decode while
   ``C_p >= C_d``, else prefill. Reading A (default): ``C_d = T^d * tokens decoded in the current decode
   stage``; reading B: ``C_d = T^d * sum over waiting requests of decode rounds waited``. ``cd_overhead``
   adds the per-round bias ``alpha_d`` to ``C_d`` (off by default, as in the paper).

Output lengths are the true ones (oracle, docs/hybrid.md, M11 and A3) unless ``lengths='predicted'``, where sorting and
``remain_token`` use ``predicted_output_tokens`` (the simulation itself always plays out the true lengths).

Utilisation (docs/hybrid.md, U1): client ``j`` is busy from the start of the prefill stage that first processes its
request to the end of that request's last decode round, stalls behind other requests' prefill stages
included; ``U = sum busy / (J * makespan)``. ``U_decode = sum_i D_i * tau_d / (J * makespan)`` is also
reported (see docs/hybrid.md).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from typing import Any

from ...budget import TimeBudget
from ...instance import Instance
from ...schedule import Batch, Item, ReplayResult, Schedule
from .pcmax import processing_times, solve_pcmax
from .timing import decode_rounds, timing_of

__all__ = [
    "POLICY_CONFIGS",
    "client_metrics",
    "round_robin",
    "simulate_pd",
    "simulate_policy",
]

RULES = ("prefill-first", "marginal")


def round_robin(instance: Instance) -> list[int]:
    """Client of every request: the k-th request in FCFS order goes to client ``k mod J``
    (docs/hybrid.md, "Online methods")."""
    J = timing_of(instance).clients
    order = sorted(range(len(instance.requests)), key=lambda i: (instance.requests[i].arrival, i))
    client = [0] * len(order)
    for k, i in enumerate(order):
        client[i] = k % J
    return client


def simulate_pd(
    instance: Instance,
    client_of: Sequence[int],
    *,
    sort_queues: bool,
    steal: bool,
    rule: str,
    cd_mode: str = "A",
    cd_overhead: bool = False,
    lengths: str = "oracle",
    whole_prompts: bool = True,
    name: str = "hybrid",
) -> Schedule:
    """Simulate PD Competition with client queues ``client_of`` and the given online rules.

    Parameters
    ----------
    client_of
        Queue (client index) of every request.
    sort_queues, steal
        Algorithm 1's longest-first sorting and work stealing.
    rule
        ``prefill-first`` or ``marginal`` (Eqs. 41-43).
    cd_mode, cd_overhead
        Reading ``A`` or ``B`` of ``C_d``; whether ``C_d`` includes the round bias.
    lengths
        ``oracle`` or ``predicted`` output lengths for sorting and ``remain_token``.
    whole_prompts
        Prefill each prompt in one stage (the paper's model, Sec. III-B setting 4): a prompt that does not
        fit the stage's remaining room waits for the next stage (first fit over the waiting requests);
        only a prompt longer than the stage capacity is split. False: split at the stage boundary.
    """
    if rule not in RULES:
        raise ValueError(f"unknown iteration rule {rule!r} (known: {', '.join(RULES)})")
    if cd_mode not in ("A", "B"):
        raise ValueError(f"unknown C_d reading {cd_mode!r} (known: A, B)")
    J = timing_of(instance).clients
    if len(client_of) != len(instance.requests) or any(not 0 <= c < J for c in client_of):
        raise ValueError("client_of must give a client in [0, J) for every request")
    sim = _PDSimulator(
        instance, client_of, sort_queues=sort_queues, steal=steal, lengths=lengths, whole_prompts=whole_prompts
    )
    while sim.done < len(instance.requests):
        sim.dispatch()
        items = sim.prefill_items() if sim.waiting else []
        if not items and not sim.decoding:
            sim.idle_until_next_arrival()
            continue
        if items and sim.decoding and rule == "marginal":
            run_prefill = sim.tm.prefill_time(sum(it.tokens for it in items)) < sim.c_d
        else:
            run_prefill = bool(items)
        if run_prefill:
            sim.prefill_stage(items)
        else:
            sim.decode_round(cd_mode, cd_overhead)
    return Schedule(instance.name, tuple(sim.batches), {"policy": name})


class _PDSimulator:
    """The state of :func:`simulate_pd`: client queues, the requests each client holds, the batches.

    :meth:`dispatch` hands each idle client its next request (stealing when enabled);
    :meth:`prefill_items` forms the prefill stage that would run now; :meth:`prefill_stage` and
    :meth:`decode_round` run one iteration and advance the clock ``now``.
    """

    def __init__(
        self,
        instance: Instance,
        client_of: Sequence[int],
        *,
        sort_queues: bool,
        steal: bool,
        lengths: str,
        whole_prompts: bool,
    ) -> None:
        self.instance = instance
        self.reqs = reqs = instance.requests
        self.tm = timing_of(instance)
        self.J = J = self.tm.clients
        self.steal = steal
        self.lengths = lengths
        self.whole_prompts = whole_prompts
        n = len(reqs)
        self.kv_cap = instance.limits.kv_capacity if instance.limits.kv_capacity is not None else math.inf
        self.dec_cap = instance.limits.token_budget
        queues: list[deque[int]] = [deque() for _ in range(J)]
        for i in sorted(range(n), key=lambda i: (reqs[i].arrival, i)):
            queues[client_of[i]].append(i)
        if sort_queues:
            queues = [deque(sorted(q, key=lambda i: (-self.estimate(i), i))) for q in queues]
        self.queues = queues
        self.remain = [sum(self.estimate(i) for i in q) for q in queues]
        self.queued = n  # requests still in some queue
        self.holder: list[int | None] = [None] * J  # request held by each client
        self.waiting: list[int] = []  # requests dispatched, prompt not yet complete (dispatch order)
        self.filled = [0] * n  # prompt tokens prefilled
        self.left = [decode_rounds(r.output_tokens) for r in reqs]  # decode rounds still to run
        self.decoding: list[int] = []  # clients whose request is in decode
        self.client_now = [-1] * n
        self.reserved = 0  # KV reserved by requests holding or about to hold KV (their max_kv)
        self.batches: list[Batch] = []
        self.now = 0.0  # current time: end of the last batch, or a later arrival when the engine idled
        self.end_last = 0.0
        self.c_d = 0.0
        self.done = 0

    def estimate(self, i: int) -> int:
        """``N^p_i + N^d_i`` with the lengths used for sorting and ``remain_token``."""
        r = self.reqs[i]
        out = (
            r.predicted_output_tokens if self.lengths == "predicted" and r.predicted_output_tokens else r.output_tokens
        )
        return r.prompt_tokens + out

    def dispatch(self) -> None:
        """Give every idle client the head of its queue, or (stealing) of the richest queue."""
        reqs, queues, remain = self.reqs, self.queues, self.remain
        richest: int | None = None  # client with most remaining tokens; valid until a queue is popped
        for j in range(self.J):
            if self.holder[j] is not None:
                continue
            donor = j
            if not (queues[j] and reqs[queues[j][0]].arrival <= self.now):
                if not self.steal or self.queued == 0:
                    continue
                if richest is None:
                    richest = max(range(self.J), key=lambda k: (remain[k], -k))
                donor = richest
                if remain[donor] <= 0 or not queues[donor] or reqs[queues[donor][0]].arrival > self.now:
                    continue
            i = queues[donor].popleft()
            richest = None
            self.queued -= 1
            remain[donor] -= self.estimate(i)
            self.holder[j] = i
            self.client_now[i] = j
            self.waiting.append(i)

    def prefill_items(self) -> list[Item]:
        """The prefill stage that would run now: waiting prompts by first fit within the stage's room
        and the KV capacity."""
        reqs = self.reqs
        room = self.tm.prefill_cap
        kv = self.reserved
        items = []
        for i in self.waiting:
            if room == 0:
                break
            need = reqs[i].prompt_tokens - self.filled[i]
            if self.whole_prompts and room < need <= self.tm.prefill_cap:
                continue  # waits for the next stage (first fit); only prompts above the capacity are split
            if self.filled[i] == 0:
                if kv + reqs[i].max_kv > self.kv_cap:
                    continue
                kv += reqs[i].max_kv
            c = min(need, room)
            items.append(Item(reqs[i].id, c))
            room -= c
        return items

    def idle_until_next_arrival(self) -> None:
        """Nothing can run: move the clock to the next arrival at the head of a queue."""
        pending = [self.reqs[q[0]].arrival for q in self.queues if q]
        if not pending:
            raise RuntimeError("hybrid simulator stalled with requests left (a request cannot fit the KV capacity)")
        self.now = max(self.now, min(pending))

    def _start(self) -> float | None:
        """The batch's ``start``: the clock when the engine idled since the last batch, else None."""
        return self.now if self.now > self.end_last else None

    def _advance(self, duration: float) -> None:
        self.now += duration
        self.end_last = self.now

    def _finish(self, i: int) -> None:
        """Request ``i`` is done: its client is free and its KV reservation released."""
        self.holder[self.client_now[i]] = None
        self.reserved -= self.reqs[i].max_kv
        self.done += 1

    def prefill_stage(self, items: list[Item]) -> None:
        """Run a prefill stage of ``items``; requests whose prompt completes start decoding."""
        reqs = self.reqs
        start = self._start()
        tokens = context = 0
        for it in items:
            i = self.instance.index(it.id)
            if self.filled[i] == 0:
                self.reserved += reqs[i].max_kv
            context += it.tokens * self.filled[i]  # a split prompt's later chunk attends to the earlier ones
            self.filled[i] += it.tokens
            tokens += it.tokens
            if self.filled[i] == reqs[i].prompt_tokens:
                self.waiting.remove(i)
                if self.left[i] == 0:
                    self._finish(i)
                else:
                    self.decoding.append(self.client_now[i])
        self.batches.append(Batch(tuple(items), start=start))
        self.c_d = 0.0
        squares = sum(it.tokens**2 for it in items)
        self._advance(self.instance.cost_model.batch_time(tokens, tokens, squares, 0, 0, context))

    def decode_round(self, cd_mode: str, cd_overhead: bool) -> None:
        """Run one decode round of the decoding clients (at most the token budget, lowest first) and
        add its share to ``C_d`` (reading ``cd_mode``)."""
        reqs = self.reqs
        start = self._start()
        active = sorted(self.decoding)[: self.dec_cap]
        batch_items = tuple(Item(reqs[self.holder[j]].id, 1) for j in active)  # type: ignore[index]
        kv_dec = kv_max = 0
        for j in active:
            i = self.holder[j]
            assert i is not None
            held = reqs[i].prompt_tokens + decode_rounds(reqs[i].output_tokens) - self.left[i]
            kv_dec += held
            kv_max = max(kv_max, held)
        for j in active:
            i = self.holder[j]
            assert i is not None
            self.left[i] -= 1
            if self.left[i] == 0:
                self.decoding.remove(j)
                self._finish(i)
        duration = self.instance.cost_model.batch_time(len(active), 0, 0, len(active), kv_dec, 0, kv_max)
        self.batches.append(Batch(batch_items, start=start))
        self.c_d += self.tm.beta_d * (len(active) if cd_mode == "A" else len(self.waiting))
        if cd_overhead:
            self.c_d += self.tm.alpha_d
        self._advance(duration)


#: The registered policies: (assignment, Algorithm 1 on/off, iteration rule, C_d reading).
POLICY_CONFIGS: dict[str, dict[str, Any]] = {
    "hybrid-baseline": {"assignment": "round-robin", "algorithm1": False, "rule": "prefill-first"},
    "hybrid-baseline-global": {"assignment": "shared", "algorithm1": False, "rule": "prefill-first"},
    "hybrid-offline": {"assignment": "offline", "algorithm1": False, "rule": "prefill-first"},
    "hybrid-online": {"assignment": "round-robin", "algorithm1": True, "rule": "marginal"},
    "hybrid": {"assignment": "offline", "algorithm1": True, "rule": "marginal"},
    "hybrid-b": {"assignment": "offline", "algorithm1": True, "rule": "marginal", "cd_mode": "B"},
}


def offline_assignment(instance: Instance, lengths: str = "oracle", time_limit: float = 10.0) -> list[int]:
    """Clients of the offline P||Cmax solution (Eqs. 26-30) on decode rounds (true or predicted lengths)."""
    p = processing_times(instance, "predicted" if lengths == "predicted" else "rounds")
    return list(solve_pcmax(p, timing_of(instance).clients, method="auto", budget=TimeBudget.of(time_limit)).client)


def simulate_policy(instance: Instance, name: str, **overrides: Any) -> Schedule:
    """Run one of :data:`POLICY_CONFIGS` (keys of a config may be overridden, plus ``lengths``, ``cd_overhead``)."""
    try:
        cfg = {**POLICY_CONFIGS[name], **overrides}
    except KeyError:
        raise KeyError(f"unknown hybrid policy {name!r} (known: {', '.join(POLICY_CONFIGS)})") from None
    lengths = cfg.get("lengths", "oracle")
    shared = cfg["assignment"] == "shared"
    if cfg["assignment"] == "offline":
        client_of = offline_assignment(instance, lengths)
    elif shared:  # one FCFS queue (client 0's) that every idle client takes its next request from
        client_of = [0] * len(instance.requests)
    else:
        client_of = round_robin(instance)
    return simulate_pd(
        instance,
        client_of,
        sort_queues=cfg["algorithm1"],
        steal=cfg["algorithm1"] or shared,
        rule=cfg["rule"],
        cd_mode=cfg.get("cd_mode", "A"),
        cd_overhead=cfg.get("cd_overhead", False),
        lengths=lengths,
        whole_prompts=cfg.get("whole_prompts", True),
        name=name,
    )


def simulate_baseline(instance: Instance) -> Schedule:
    """``hybrid-baseline``: round robin, FCFS, prefill-first (docs/hybrid.md, "Online methods")."""
    return simulate_policy(instance, "hybrid-baseline")


def simulate_baseline_global(instance: Instance) -> Schedule:
    """``hybrid-baseline-global``: one shared FCFS queue (vLLM's waiting queue), prefill-first."""
    return simulate_policy(instance, "hybrid-baseline-global")


def simulate_offline(instance: Instance) -> Schedule:
    """``hybrid-offline``: offline P||Cmax assignment, FCFS, prefill-first."""
    return simulate_policy(instance, "hybrid-offline")


def simulate_online(instance: Instance) -> Schedule:
    """``hybrid-online``: round robin, Algorithm 1, marginal-cost rule (reading A)."""
    return simulate_policy(instance, "hybrid-online")


def simulate_hybrid(instance: Instance) -> Schedule:
    """``hybrid``: offline assignment, Algorithm 1, marginal-cost rule (reading A)."""
    return simulate_policy(instance, "hybrid")


def simulate_hybrid_b(instance: Instance) -> Schedule:
    """``hybrid-b``: as ``hybrid`` with reading B of ``C_d``."""
    return simulate_policy(instance, "hybrid-b")


def client_metrics(instance: Instance, schedule: Schedule, rep: ReplayResult) -> dict[str, float]:
    """Makespan, utilisation ``U`` (docs/hybrid.md, U1), ``U_decode`` and tokens/s of a replayed schedule.

    ``U`` counts, for every request, the time from the start of the first batch that processes it to its
    finish; with at most J requests holding KV (one per client) this is the clients' busy time.
    """
    if rep.metrics is None:
        raise ValueError("client metrics need a schedule that replays cleanly")
    J = timing_of(instance).clients
    first_start: dict[str, float] = {}
    for batch, start in zip(schedule.batches, rep.starts):
        for it in batch.items:
            first_start.setdefault(it.id, start)
    busy = math.fsum(rep.outcomes[r.id].finish - first_start[r.id] for r in instance.requests)  # type: ignore[operator]
    makespan = rep.metrics.makespan
    tm = timing_of(instance)
    decode_work = sum(decode_rounds(r.output_tokens) for r in instance.requests) * tm.tau_d
    return {
        "makespan": makespan,
        "utilisation": busy / (J * makespan),
        "u_decode": decode_work / (J * makespan),
        "tokens_per_s": rep.metrics.throughput,
        "batches": rep.metrics.batches,
        "prefill_stages": sum(1 for x in rep.prefill_tokens if x > 0),
        "decode_rounds": sum(1 for x in rep.decode_items if x > 0),
    }
