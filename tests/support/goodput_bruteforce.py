"""Independent exhaustive search for the most requests meeting their SLOs (tests only; NOT the model).

Offline instances only (every arrival 0): then waiting never helps (removing a wait moves every later
event earlier by the same amount, which lowers TTFTs, latencies and every TPOT span), so every
schedule is a sequence of batches run back to back, enumerated from the contract by
:func:`tests.support.infermax_bruteforce` (every legal batch, eviction-only ones included but never
two in a row: two consecutive eviction-only batches merge into one). A request's outcome is read
from the first-token and finish times along the path with the replay's tolerance. The search stops
a path once every request with an SLO is finished or past its latest deadline; requests without an
SLO count as met (they are served afterwards). Memoised on the joint state, the time and the
outcomes so far.
"""

from __future__ import annotations

import math
from functools import cache

from optsched.instance import Instance
from optsched.metrics import TIME_RTOL
from tests.support.infermax_bruteforce import _successors


def _targets(inst: Instance) -> list[tuple[float, float, float]]:
    out = []
    for r in inst.requests:
        s = r.slo
        if s is None:
            out.append((math.inf, math.inf, math.inf))
            continue
        tpot = min(x for x in (s.tpot, s.atgt, math.inf) if x is not None)
        out.append((s.ttft or math.inf, tpot, s.e2e or math.inf))
    return out


def _meets(target: tuple[float, float, float], first: float, finish: float, out: int) -> bool:
    ttft, tpot, e2e = target
    ok = first <= ttft * (1 + TIME_RTOL) and finish <= e2e * (1 + TIME_RTOL)
    return ok and (out < 2 or (finish - first) / (out - 1) <= tpot * (1 + TIME_RTOL))


def exhaustive_goodput(inst: Instance, evict: bool = True, chunk: bool = True, hybrid: bool = True) -> int:
    """The most requests meeting their SLOs over all schedules of an offline instance."""
    reqs = inst.requests
    if any(r.arrival > 0 for r in reqs):
        raise ValueError("exhaustive goodput search handles offline instances only")
    targets = _targets(inst)
    carries = [any(math.isfinite(x) for x in t) for t in targets]
    free = sum(not c for c in carries)
    last, at_first = [], []  # latest finish that can meet; decided at the first token
    for t, r in zip(targets, reqs):
        span = t[1] * (r.output_tokens - 1) if r.output_tokens > 1 else 0.0
        at_first.append(math.isinf(t[1]) and math.isinf(t[2]))
        if any(math.isfinite(x) for x in t) and math.isinf(t[0]) and math.isinf(t[2]):
            raise ValueError("exhaustive goodput search needs a TTFT or latency target with a TPOT one")
        last.append((t[0] if at_first[-1] else min(t[2], t[0] + span)) * (1 + 2 * TIME_RTOL))
    horizon = max((d for d, c in zip(last, carries) if c and math.isfinite(d)), default=0.0)

    @cache
    def best(state: tuple, clock: float, outcome: tuple, evicted_last: bool) -> int:
        met = sum(1 for i, o in enumerate(outcome) if carries[i] and o is True)
        open_ = [i for i, o in enumerate(outcome) if carries[i] and (o is None or isinstance(o, float))]
        if not open_ or clock > horizon:
            return met + free
        # no schedule meets more than the open requests whose latest finish has not passed
        top, ceiling = met + free, met + free + sum(1 for i in open_ if clock <= last[i])
        for cost, new, batch in _successors(inst, state, evict, chunk, hybrid):
            if top == ceiling:
                break
            only_evict = not batch.items
            if only_evict and evicted_last:
                continue
            end = clock + cost
            out = list(outcome)
            for i, ((_, _, g0), (_, _, g1)) in enumerate(zip(state, new)):
                if g0 == 0 and g1 >= 1:
                    out[i] = end  # first token
                    if carries[i] and at_first[i]:  # met once served (it can always finish)
                        out[i] = end <= targets[i][0] * (1 + TIME_RTOL)
                        continue
                if carries[i] and not at_first[i] and g1 == reqs[i].output_tokens and g0 < g1:
                    out[i] = _meets(targets[i], out[i], end, reqs[i].output_tokens)
            top = max(top, best(new, end, tuple(out), only_evict))
        return top

    start = tuple((0, r.prompt_tokens, 0) for r in reqs)
    value = best(start, 0.0, tuple(None for _ in reqs), False)
    best.cache_clear()
    return value
