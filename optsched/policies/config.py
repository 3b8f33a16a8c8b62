"""Baseline policies as data: the knobs of InferMax's unified scheduler (Algorithm 1).

Every baseline of the InferMax paper (Table 1 and Appendix A.3) is one :class:`PolicyConfig`;
:mod:`optsched.policies.engine` runs any of them. The table :data:`POLICY_CONFIGS` holds the named
policies, each with its eviction-free twin (name suffix ``-ef``).

====================  ===========================  ======  =======  ==========  =============
policy                groups, in priority order    hybrid  chunked  P (chunk)   order in group
====================  ===========================  ======  =======  ==========  =============
``vllm``              waiting, running             no      no       P           arrival
``vllm-hy``           waiting, running             yes     no       P           arrival
``vllm-v1``           running, waiting             yes     yes      P           arrival
``sarathi``           run-decode, run-prefill, w.  yes     yes      min(512, P) arrival
``sarathi-pc``        run-decode, run-prefill, w.  yes     yes      P (= C)     arrival
``sarathi-nocp``      run-decode, run-prefill, w.  yes     no       P           arrival
``sarathi-nohy``      run-decode, run-prefill, w.  no      no       P           arrival
``rank-org``          all (one group)              yes     yes      P           arrival
``rank-i``            all (one group)              yes     yes      P           prompt length
``rank-o``            all (one group)              yes     yes      P           output length
``mc-sf``             run-decode, run-prefill, w.  yes     yes      min(512, P) output length
``srpf``              run-prefill, w., run-decode  no      no       P           remaining prefill
``slo-budget``        run-decode, run-prefill, w.  yes     yes      P, timed    arrival, late last
``slo-budget-fcfs``   run-decode, run-prefill, w.  yes     yes      P, timed    arrival
``slo-shed``          run-decode, run-prefill, w.  yes     yes      P, timed    arrival, late last
``slo-lazy``          run-decode, run-prefill, w.  yes     yes      P, timed    arrival, late last
====================  ===========================  ======  =======  ==========  =============

``vllm`` and ``vllm-hy`` are the InferMax paper's vLLM (its V0 scheduler: prefills first).
``vllm-v1`` is vLLM's V1 scheduler as vLLM 0.32 runs it (``vllm/v1/core/sched/scheduler.py``,
``Scheduler.schedule``): running requests first in admission order, then the waiting queue FCFS,
chunked prefill with P = C, KV in blocks of 16 tokens; checked batch for batch against vLLM's own
scheduler (:mod:`optsched.executor.native`, docs/policies.md).

``mc-sf`` is the memory-constrained shortest-first policy of Jaillet et al. (2025), for mean
latency: every running request first (decodes, then prefill chunks of Sarathi's size, as in
stall-free batching), then waiting requests by shortest output while the KV look-ahead of
:func:`optsched.policies.orders.lookahead_fits` holds (``kv_lookahead``). ``srpf``
(shortest remaining prefill first), for mean TTFT, is a prefill-first scheduler without hybrid
batches, like vLLM's, that serves the prompt chunks it started (prompts longer than P), then the
waiting queue sorted by prompt tokens, then decodes: a shortest-remaining-processing-time rule on
the prefill work that decides the first token.

``slo-budget`` (:mod:`optsched.policies.slo`) batches for P99 SLOs, in the spirit of Sarathi-Serve's
SLO-derived token budget: decodes first, then prefill chunks only while the batch's time under the
instance's cost model stays within a time budget, by default the least TPOT target among the
requests (``tpot_budget``); before each batch R_w is split by Moore-Hodgson's rule on the TTFT
deadlines (``ttft_drop``), so that the requests that can still meet their deadline go first and the
late ones last. ``slo-budget-fcfs`` keeps the time budget and R_w's FCFS order. ``slo-shed`` is
``slo-budget`` that gives up the TPOT of the 1 % of requests with the most decode work (``tpot_shed``,
an oracle of the output lengths like ``rank-o``): their decodes come after every other candidate and
only where the batch stays within the budget, so that under load the others' prefill gets their share.
``slo-lazy`` is ``slo-budget`` whose decodes wait while their request's TPOT has slack (``tpot_lazy``,
:mod:`optsched.policies.slo_lazy`): a decode is taken before the prefill chunks only when its request
could otherwise miss its TPOT target, and after them within the budget.

P is the instance's ``prefill_budget`` (C = P = 4096 in the paper); a policy chunk larger than the
instance's P is clipped to it, so every schedule respects the instance's limits.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

__all__ = ["GROUPS", "ORDERS", "POLICY_CONFIGS", "PREFILL_TILE", "PolicyConfig", "policy_config"]

#: Candidate groups of GetNextBatch. ``waiting`` is R_w (in the policy's order, FCFS by default; stop
#: at the first failure, B2);
#: ``running`` is R_r; ``running_decode`` / ``running_prefill`` split R_r by phase (Sarathi);
#: ``all`` is R_w and R_r merged into one group (ranking schedulers), or after ``running_decode`` what
#: the decodes left: R_r's prefills and R_w merged (the decodes first, then every prompt by priority).
GROUPS = ("waiting", "running", "running_decode", "running_prefill", "all")
#: The group sets a policy may take, each covering R_w and R_r once: ``all`` after ``running_decode``
#: walks what the decodes left (R_r's prefills and R_w) merged by priority.
COVERS = (
    {"all"},
    {"waiting", "running"},
    {"waiting", "running_decode", "running_prefill"},
    {"running_decode", "all"},
)
#: Priority keys: arrival (FCFS), initial prompt length I, true output length O (an oracle, as in
#: the paper's Rank_O), remaining prefill tokens (prompt - m, recomputed before every batch); ties
#: broken by arrival, then by the order requests were added (:func:`.orders.order_key`).
ORDERS = ("arrival", "prompt", "output", "remaining-prefill")

#: Sarathi's chunk size (Table 1).
SARATHI_CHUNK = 512
#: Tokens per tile of ``prefill_share`` on a profile without a tile term (that of the shipped H200 profile).
PREFILL_TILE = 128
#: vLLM's default KV block size in tokens (``vllm-v1``, :mod:`optsched.executor.native`).
VLLM_BLOCK = 16


@dataclass(frozen=True)
class PolicyConfig:
    """One policy of the unified scheduler.

    Attributes
    ----------
    name
        Registry name.
    groups
        Candidate groups in priority order (see :data:`GROUPS`).
    order
        Priority key inside groups and for victim choice (see :data:`ORDERS`): a sort key, a pure
        function of the request's current prompt, KV slots m, initial prompt and output lengths,
        arrival and index (:func:`optsched.policies.orders.order_key`). With an order other than
        ``arrival`` the ``waiting`` group is kept sorted by it (admitted in that order up to the
        first failure, B2).
    hybrid
        Hybrid batching: prefill and decode items may share a batch (step 2).
    chunked
        Chunked prefill: a prefill candidate may take a chunk of its remaining prompt.
    chunk
        The policy's prefill budget P (``None`` = the instance's ``prefill_budget``); clipped to
        the instance's ``prefill_budget``.
    eviction_free
        Reserve I + O - 1 KV slots at admission; never evict (paper section 4.3).
    prefill_counts_decodes
        B4: a prefill candidate may take up to P - (all tokens already in the batch), decodes
        included (the paper's and the public code's rule). False: P - (prefill tokens in the batch).
    evict_for_waiting
        Whether a waiting candidate that lacks KV may evict lower-priority running requests
        (the ranking schedulers of the public code do; vLLM and Sarathi do not).
    evicted_to_front
        B1: evicted requests go to the front of the FCFS waiting queue (vLLM recompute); False
        appends them to the tail (the paper's literal wording). Sorted waiting queues ignore it.
    kv_lookahead
        MC-SF admission: a waiting request is admitted only when the projected KV of the running
        requests and it stays within M at every future iteration
        (:func:`optsched.policies.orders.lookahead_fits`, on the (peak, iterations left) pairs of
        :func:`optsched.policies.orders.projection`); on top of the reservation test, which still
        decides evictions. Eviction-free twins skip it (their full reservations imply it).
    kv_block
        KV allocation unit in tokens (vLLM's ``block_size``): every reservation is rounded up to
        whole blocks and at most ``floor(M / kv_block)`` blocks are used, so a decode needs a new
        block only when its request's KV reaches a block boundary. 1 = token-granular KV.
    kv_watermark
        KV blocks (of ``kv_block`` slots) a waiting request must leave free to be admitted while
        other requests run: vLLM's ``watermark`` (a fraction f of its blocks, ``int(f * (floor(M /
        block_size) + 1))`` blocks, its block pool counting one null block). 0 = none (vLLM's default).
    time_budget
        Seconds: a prefill chunk is cut so that the time under the instance's cost model of a batch
        holding decodes stays within it (decodes are never cut, nor a batch without decodes). None =
        no time budget, or with ``tpot_budget`` the least TPOT target among the instance's requests.
    tpot_budget
        The time budget is the least TPOT target (``slo.tpot``) among the instance's requests when
        ``time_budget`` is None; an instance without one is refused (:func:`.slo.resolve`).
    ttft_drop
        Before each batch R_w is reordered by Moore-Hodgson's rule on the requests' TTFT deadlines
        (arrival + ``slo.ttft``): those that can still meet them first, the late ones after, each
        part in R_w's order (:func:`.slo.on_time_first`); an instance without TTFT targets is refused.
    tpot_shed
        Fraction q of the requests whose TPOT the policy may give up (0 = none): the decodes of the
        floor(q (N - 1)) requests of the largest decode work (:func:`.slo.decode_work`, on the true output
        lengths) are taken after every other candidate, each only while the batch stays within the time
        budget or is empty (:func:`.slo.fits_decode`). floor(q (N - 1)) is the most requests a quantile
        1 - q of N values (numpy's linear one) tolerates above a limit. Needs a time budget and the
        ``running_decode`` group.
    shed_work
        Seconds: requests whose decode work is at least this are deferred as ``tpot_shed`` says. None =
        from ``tpot_shed`` and the instance's requests (:func:`.slo.resolve`), or no deferral.
    tpot_lazy
        Laxity rule (:mod:`.slo_lazy`): before each batch a running decode is *mandatory* when its request
        could miss its TPOT target without it (every later batch within the time budget), else *optional*;
        the optional decodes are taken after every other candidate, each while the batch stays within the
        budget or is empty, and a prefill chunk is cut to the budget while any request with a TPOT target
        decodes. The optional decodes wait only while a request without its first token is *urgent*:
        within ``lazy_horizon`` times its TTFT target of its TTFT deadline. Needs a time budget and the
        ``running_decode`` group.
    lazy_horizon
        The fraction h of a request's TTFT target before its deadline from which it is urgent
        (``tpot_lazy``); ``inf``: every request not yet late is.
    prefill_share
        Adaptive prompt share s (:mod:`.share`; None = off): in a batch that starts while D > 0 running
        requests decode and W requests wait for their prompt (R_w and the running prefills), the
        policy's prefill budget P becomes ``min(P, prefill_tile * max(1, floor(s W / D + 1/2)))`` tokens
        (the decodes counted as B4 says), so the prompt chunks beside the decodes grow with the prompts
        waiting per decode; with no decode the budget is P. Needs hybrid, chunked prefill and the
        decodes first (``groups`` starting with ``running_decode``).
    prefill_tile
        Tokens per tile of ``prefill_share``; None (the default): the instance's cost-model token tile
        (``token_tile``), or :data:`PREFILL_TILE` for a profile without a tile term (:meth:`share_tile`).
    """

    name: str
    groups: tuple[str, ...]
    order: str = "arrival"
    hybrid: bool = True
    chunked: bool = True
    chunk: int | None = None
    eviction_free: bool = False
    prefill_counts_decodes: bool = True
    evict_for_waiting: bool = False
    evicted_to_front: bool = True
    kv_lookahead: bool = False
    kv_block: int = 1
    kv_watermark: int = 0
    time_budget: float | None = None
    tpot_budget: bool = False
    ttft_drop: bool = False
    tpot_shed: float = 0.0
    shed_work: float | None = None
    tpot_lazy: bool = False
    lazy_horizon: float = 0.5
    prefill_share: float | None = None
    prefill_tile: int | None = None

    def __post_init__(self) -> None:
        if not self.groups or any(g not in GROUPS for g in self.groups):
            raise ValueError(f"policy {self.name!r}: groups must be a non-empty subset of {GROUPS}")
        if len(set(self.groups)) != len(self.groups):
            raise ValueError(f"policy {self.name!r}: a group is listed twice")
        if set(self.groups) not in COVERS or ("all" in self.groups and self.groups[-1] != "all"):
            raise ValueError(
                f"policy {self.name!r}: groups must cover R_w and R_r exactly once: ('all',), waiting and"
                " running, or waiting, running_decode and running_prefill (in any order), or running_decode"
                " then all"
            )
        if self.order not in ORDERS:
            raise ValueError(f"policy {self.name!r}: order must be one of {ORDERS}")
        if self.chunk is not None and self.chunk < 1:
            raise ValueError(f"policy {self.name!r}: chunk must be >= 1")
        if self.kv_block < 1:
            raise ValueError(f"policy {self.name!r}: kv_block must be >= 1")
        if self.kv_watermark < 0:
            raise ValueError(f"policy {self.name!r}: kv_watermark must be >= 0")
        if self.time_budget is not None and not 0 < self.time_budget < math.inf:
            raise ValueError(f"policy {self.name!r}: time_budget must be a positive number of seconds")
        if self.ttft_drop and (self.order != "arrival" or "all" in self.groups):
            raise ValueError(f"policy {self.name!r}: ttft_drop reorders an FCFS R_w (order 'arrival', no 'all' group)")
        if not 0 <= self.tpot_shed < 1:
            raise ValueError(f"policy {self.name!r}: tpot_shed must be a fraction in [0, 1)")
        if self.shed_work is not None and not self.shed_work >= 0:
            raise ValueError(f"policy {self.name!r}: shed_work must be a number of seconds >= 0")
        sheds = self.tpot_shed > 0 or self.shed_work is not None
        decode_group = "running_decode" in self.groups and "all" not in self.groups  # deferred decodes stay out
        if sheds and (not (self.tpot_budget or self.time_budget) or not decode_group):
            raise ValueError(
                f"policy {self.name!r}: tpot_shed and shed_work defer decodes within a time budget (tpot_budget"
                " or time_budget) and need the running_decode group without all"
            )
        if self.tpot_lazy and (not (self.tpot_budget or self.time_budget) or not decode_group):
            raise ValueError(
                f"policy {self.name!r}: tpot_lazy defers decodes within a time budget (tpot_budget or time_budget)"
                " and needs the running_decode group without all"
            )
        if not self.lazy_horizon > 0:
            raise ValueError(f"policy {self.name!r}: lazy_horizon must be a positive fraction of the TTFT target")
        if self.prefill_tile is not None and self.prefill_tile < 1:
            raise ValueError(f"policy {self.name!r}: prefill_tile must be >= 1 token")
        if self.prefill_share is None and self.prefill_tile is not None:
            raise ValueError(f"policy {self.name!r}: prefill_tile sizes prefill_share's tiles: set prefill_share too")
        if self.prefill_share is not None and not 0 < self.prefill_share < math.inf:
            raise ValueError(f"policy {self.name!r}: prefill_share must be a positive finite number of tiles")
        shares_decodes = self.hybrid and self.chunked and self.groups[0] == "running_decode"
        if self.prefill_share is not None and not shares_decodes:
            raise ValueError(
                f"policy {self.name!r}: prefill_share sizes the prompt chunks beside the decodes: it needs hybrid"
                " and chunked prefill and the groups to start with running_decode"
            )

    def eviction_free_variant(self) -> PolicyConfig:
        """The ``-ef`` twin: same policy, full reservation at admission, no evictions."""
        return replace(self, name=f"{self.name}-ef", eviction_free=True)

    def share_tile(self, token_tile: int) -> int:
        """Tokens per tile of ``prefill_share`` under a cost model whose token tile is ``token_tile``
        (0: no tile term): ``prefill_tile`` where set, else ``token_tile``, else :data:`PREFILL_TILE`."""
        return self.prefill_tile if self.prefill_tile is not None else (token_tile or PREFILL_TILE)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["groups"] = list(self.groups)
        return out


_WR = ("waiting", "running")
_DECODE_FIRST = ("running_decode", "running_prefill", "waiting")
_PREFILL_FIRST = ("running_prefill", "waiting", "running_decode")
_BASE = (
    PolicyConfig("vllm", _WR, hybrid=False, chunked=False),
    PolicyConfig("vllm-hy", _WR, hybrid=True, chunked=False),
    PolicyConfig("vllm-v1", ("running", "waiting"), kv_block=VLLM_BLOCK),
    PolicyConfig("sarathi", _DECODE_FIRST, chunk=SARATHI_CHUNK),
    PolicyConfig("sarathi-pc", _DECODE_FIRST),
    PolicyConfig("sarathi-nocp", _DECODE_FIRST, chunked=False),
    PolicyConfig("sarathi-nohy", _DECODE_FIRST, hybrid=False, chunked=False),
    PolicyConfig("rank-org", ("all",), order="arrival", evict_for_waiting=True),
    PolicyConfig("rank-i", ("all",), order="prompt", evict_for_waiting=True),
    PolicyConfig("rank-o", ("all",), order="output", evict_for_waiting=True),
    PolicyConfig("mc-sf", _DECODE_FIRST, order="output", chunk=SARATHI_CHUNK, kv_lookahead=True),
    PolicyConfig("srpf", _PREFILL_FIRST, order="remaining-prefill", hybrid=False, chunked=False),
    PolicyConfig("slo-budget", _DECODE_FIRST, tpot_budget=True, ttft_drop=True),
    PolicyConfig("slo-budget-fcfs", _DECODE_FIRST, tpot_budget=True),
    PolicyConfig("slo-shed", _DECODE_FIRST, tpot_budget=True, ttft_drop=True, tpot_shed=0.01),
    PolicyConfig("slo-lazy", _DECODE_FIRST, tpot_budget=True, ttft_drop=True, tpot_lazy=True),
)

#: Every named policy and its eviction-free twin, by name.
POLICY_CONFIGS: dict[str, PolicyConfig] = {p.name: p for base in _BASE for p in (base, base.eviction_free_variant())}


def policy_config(policy: str | PolicyConfig) -> PolicyConfig:
    """The :class:`PolicyConfig` named ``policy`` (or ``policy`` itself)."""
    if isinstance(policy, PolicyConfig):
        return policy
    try:
        return POLICY_CONFIGS[policy]
    except KeyError:
        raise KeyError(f"unknown policy {policy!r} (known: {', '.join(sorted(POLICY_CONFIGS))})") from None
