"""The exact search of mean latency and mean TTFT (:mod:`.meansearch`) as a phase of the InferMax solve.

Below :data:`~.model.SCALE_MIN_REQUESTS` requests, for ``latency`` and ``ttft`` with short chunks
(:func:`search_applies`), the solve runs the search below its best candidate with
:data:`SEARCH_SHARE` of the time left (:func:`search_phase`); the model gets the rest.
"""

from __future__ import annotations

from typing import Any

from ...budget import TimeBudget
from ...instance import Instance
from .candidates import CandidatePool
from .meansearch import MEAN_SEARCH, MEAN_SEARCH_DIVE, mean_search

__all__ = [
    "MEAN_OBJECTIVES",
    "MEAN_SEARCH_NO_EVICT",
    "NO_EVICT_PART",
    "SEARCH_MAX_FILL",
    "SEARCH_SHARE",
    "search_applies",
    "search_phase",
]

#: The objectives of the search in an InferMax solve, and the share of the time left it takes there
#: (the model gets the rest).
MEAN_OBJECTIVES, SEARCH_SHARE = ("latency", "ttft"), 0.9

#: For ``latency`` with evictions allowed and neither a KV capacity nor a running limit, the part of
#: the search's share that the eviction-free search takes first, and the name of its schedule (the
#: best without evictions, when it ends by itself).
NO_EVICT_PART, MEAN_SEARCH_NO_EVICT = 0.25, "mean-search-no-evict"

#: The longest chunk (min(C, P) and the longest prompt the search may prefill) with which a solve
#: runs the search: a state's batches multiply with the chunk sizes each request may take.
SEARCH_MAX_FILL = 16


def search_applies(instance: Instance, objective: str, evict: bool = True) -> bool:
    """Whether an InferMax solve of ``objective`` runs the search on ``instance``
    (:data:`MEAN_OBJECTIVES`, chunks of at most :data:`SEARCH_MAX_FILL` tokens). The longest prompt
    the search prefills is a request's own I, or I + O - 1 for ``latency`` with evictions (a refill
    after an eviction prefills the tokens generated too; for ``ttft`` the search refills only before
    a first token: E5 of :mod:`.meanproblem`)."""
    lim = instance.limits
    refills = objective == "latency" and evict
    longest = max(r.prompt_tokens + (r.output_tokens - 1 if refills else 0) for r in instance.requests)
    return objective in MEAN_OBJECTIVES and min(lim.token_budget, lim.prefill_budget, longest) <= SEARCH_MAX_FILL


def search_phase(pool: CandidatePool, budget: TimeBudget) -> tuple[float, dict[str, Any]]:
    """The search as a phase of the InferMax solve: below the pool's best candidate (the incumbent),
    with :data:`SEARCH_SHARE` of the time left of ``budget`` and the options' restrictions. Its
    schedule (better than every candidate) joins the pool as :data:`MEAN_SEARCH` where the search
    took it as its optimal goal, else as :data:`MEAN_SEARCH_DIVE` (its best dive's, proven optimal
    when nothing queued was below it). For ``latency`` with evictions allowed but neither a KV
    capacity nor a running limit (an eviction then frees nothing a later batch needs), the search
    without them runs first with :data:`NO_EVICT_PART` of that share: far fewer batches a state (for
    ``ttft`` there the search lists no eviction at all: E6 of :mod:`.meanproblem`). Its schedule
    (its best without evictions below the incumbent, optimal without them when it ends by itself)
    joins the pool as :data:`MEAN_SEARCH_NO_EVICT` and lowers the incumbent of the full search; its
    bound is not one of the full problem's and is not used.

    Returns its proven bound and what it did (the solve's ``extra['mean_search']``)."""
    opts = pool.options
    share = budget.share(SEARCH_SHARE)
    restrictions = {"no_hybrid": opts.no_hybrid, "no_chunk": opts.no_chunk}
    first = None
    limits = pool.instance.limits
    if opts.objective == "latency" and not opts.no_evict and limits.unbounded_residency:  # eviction-free first
        first = mean_search(
            pool.instance, opts.objective, pool.best.value, share.part(NO_EVICT_PART), no_evict=True, **restrictions
        )
        pool.offer(MEAN_SEARCH_NO_EVICT, first.schedule)
    found = mean_search(pool.instance, opts.objective, pool.best.value, share, no_evict=opts.no_evict, **restrictions)
    dived = found.schedule is not None and found.schedule.meta["solver"] == MEAN_SEARCH_DIVE
    pool.offer(MEAN_SEARCH_DIVE if dived else MEAN_SEARCH, found.schedule)
    info: dict[str, Any] = {
        "status": str(found.status),
        "bound": found.bound,
        "expanded": found.expanded,
        "labels": found.labels,
        "dives": list(found.dives),
    }
    if first is not None:
        info["no_evict"] = {
            "status": str(first.status),
            "expanded": first.expanded,
            "labels": first.labels,
            "dives": list(first.dives),
        }
    return found.bound, info
