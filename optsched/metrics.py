"""Per-request outcomes and schedule metrics (docs/schedule.md, tail metrics and goodput).

:func:`~optsched.schedule.replay` records, per request, the start of the first batch that serves it,
its first-token time, its finish time and its evictions (:class:`RequestOutcome`); from those,
:func:`compute_metrics` derives the schedule's :class:`Metrics`:

- per request: TTFT = first token - arrival, TPOT = (finish - first token) / (O - 1) (undefined for
  O = 1), latency = finish - arrival, queue = start of the first batch that serves it - arrival;
- means (docs/schedule.md), and for each of ``ttft``, ``tpot``, ``latency`` and ``queue`` the
  P50, P90, P95, P99 (:func:`numpy.percentile`, its default linear interpolation) and max over the
  requests where the value is defined (None when it is defined for none);
- ``goodput``: requests that meet every SLO they carry, per second of makespan.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .instance import Request

__all__ = [
    "PERCENTILES",
    "TAIL_KEYS",
    "TAIL_QUANTITIES",
    "TIME_RTOL",
    "Metrics",
    "RequestOutcome",
    "compute_metrics",
    "metrics_of_arrays",
    "metrics_of_columns",
    "outcomes_from_columns",
    "tail_summaries",
    "tail_summary",
]

#: Relative tolerance for time comparisons (batch starts, arrivals, SLOs).
TIME_RTOL = 1e-9

#: Percentiles reported for every per-request quantity (plus the max).
PERCENTILES = (50, 90, 95, 99)
#: The per-request quantities summarised by percentiles (:class:`RequestOutcome` properties).
TAIL_QUANTITIES = ("ttft", "tpot", "latency", "queue")
#: The statistics of each quantity (key suffixes) and the percentiles that compute them (100: the max).
_STATS = (*(f"p{p}" for p in PERCENTILES), "max")
_QS = (*PERCENTILES, 100)
#: Keys of the tail metrics in :class:`Metrics`: ``ttft_p50 ... ttft_max``, then ``tpot_``, ...
TAIL_KEYS = tuple(f"{q}_{s}" for q in TAIL_QUANTITIES for s in _STATS)


@dataclass(frozen=True)
class RequestOutcome:
    """What happened to one request under a schedule (times in seconds, absolute).

    Attributes
    ----------
    request
        The request.
    first_token
        End of the batch of its first generated token ever (None: never generated one).
    finish
        End of the batch of its last token (None: unfinished).
    evictions
        How many times its KV was evicted.
    first_scheduled
        Start of the first batch with an item of it (None: never served).
    """

    request: Request
    first_token: float | None
    finish: float | None
    evictions: int
    first_scheduled: float | None = None

    @property
    def ttft(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.request.arrival

    @property
    def latency(self) -> float | None:
        return None if self.finish is None else self.finish - self.request.arrival

    @property
    def queue(self) -> float | None:
        """Queueing delay: start of the first batch that serves the request minus its arrival."""
        return None if self.first_scheduled is None else self.first_scheduled - self.request.arrival

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
        return all(target is None or value is None or value <= target * (1 + TIME_RTOL) for target, value in checks)


class _OutcomeBuilder:
    """:class:`RequestOutcome`'s attributes written plainly, then the object becomes a
    :class:`RequestOutcome` by ``__class__`` assignment (see :func:`outcomes_from_columns`)."""

    def __init__(self, request: Request, first_token: float | None, finish: float | None, evictions: int,
                 first_scheduled: float | None) -> None:  # fmt: skip
        self.request = request
        self.first_token = first_token
        self.finish = finish
        self.evictions = evictions
        self.first_scheduled = first_scheduled
        self.__class__ = RequestOutcome  # type: ignore[assignment]


def outcomes_from_columns(
    requests: Iterable[Request],
    first_token: Iterable[float | None],
    finish: Iterable[float | None],
    evictions: Iterable[int],
    first_scheduled: Iterable[float | None],
) -> dict[str, RequestOutcome]:
    """Per request id, its :class:`RequestOutcome` from parallel columns: the same objects as
    ``RequestOutcome(...)`` (tested), built about twice as fast (a frozen dataclass sets each field
    through ``object.__setattr__``)."""
    outs = map(_OutcomeBuilder, requests, first_token, finish, evictions, first_scheduled)
    return {o.request.id: o for o in outs}  # type: ignore[misc]


@dataclass(frozen=True)
class Metrics:
    """Schedule metrics (times in seconds): docs/schedule.md, tail percentiles and goodput.

    Every ``<q>_p<k>`` is the k-th percentile of the per-request quantity q (numpy's linear
    interpolation) over the requests where q is defined, ``<q>_max`` its maximum; None when q is
    defined for no request (``tpot`` when every request has one output token). ``goodput`` is the
    number of requests meeting every SLO they carry divided by the makespan.
    """

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
    goodput: float
    ttft_p50: float | None
    ttft_p90: float | None
    ttft_p95: float | None
    ttft_p99: float | None
    ttft_max: float | None
    tpot_p50: float | None
    tpot_p90: float | None
    tpot_p95: float | None
    tpot_p99: float | None
    tpot_max: float | None
    latency_p50: float | None
    latency_p90: float | None
    latency_p95: float | None
    latency_p99: float | None
    latency_max: float | None
    queue_p50: float | None
    queue_p90: float | None
    queue_p95: float | None
    queue_p99: float | None
    queue_max: float | None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def tail_summary(name: str, values: Sequence[float | None]) -> dict[str, float | None]:
    """``{name_p50, name_p90, name_p95, name_p99, name_max}`` over the defined (non-None) values."""
    return tail_summaries({name: values})


def tail_summaries(columns: Mapping[str, Sequence[float | None]]) -> dict[str, float | None]:
    """:func:`tail_summary` of each named quantity, in one :func:`numpy.percentile` call per count of
    defined values (one call when every quantity is defined for the same requests).

    The maximum is the 100th percentile (linear interpolation at the last order statistic is the
    value itself); each row of the call is computed as a call on that row alone would compute it.
    """
    return _tails({name: np.array([v for v in values if v is not None], float) for name, values in columns.items()})


def _tails(defined: Mapping[str, np.ndarray]) -> dict[str, float | None]:
    """:func:`tail_summaries` of each quantity's defined values, in order."""
    by_count: dict[int, list[str]] = {}
    for name, vals in defined.items():
        by_count.setdefault(len(vals), []).append(name)
    stats: dict[str, list[float | None]] = {name: [None] * (len(PERCENTILES) + 1) for name in by_count.get(0, ())}
    for count, names in by_count.items():
        if count:
            table = np.percentile(np.array([defined[name] for name in names], dtype=float), _QS, axis=1)
            stats.update((name, table[:, k].tolist()) for k, name in enumerate(names))
    return {f"{name}_{s}": v for name in defined for s, v in zip(_STATS, stats[name])}


def _times(values: Iterable[float | None]) -> np.ndarray:
    return np.array([math.nan if v is None else v for v in values], np.float64)


def compute_metrics(outcomes: Iterable[RequestOutcome], makespan: float, evictions: int, batches: int) -> Metrics:
    """Metrics of a complete schedule from its per-request outcomes."""
    outs = list(outcomes)
    first_token, finish = _times(o.first_token for o in outs), _times(o.finish for o in outs)
    return metrics_of_columns(
        outs, first_token, finish, _times(o.first_scheduled for o in outs), makespan, evictions, batches
    )


def metrics_of_columns(
    outs: Sequence[RequestOutcome],
    first_token: np.ndarray,
    finish: np.ndarray,
    first_scheduled: np.ndarray,
    makespan: float,
    evictions: int,
    batches: int,
) -> Metrics:
    """:func:`compute_metrics` with the outcomes' times also given as arrays (NaN for None), in
    their order: the per-request quantities are computed on the arrays, with the same float
    arithmetic as the :class:`RequestOutcome` properties; only requests carrying an SLO are asked
    :attr:`RequestOutcome.meets_slo`."""
    n = len(outs)
    reqs = [o.request for o in outs]
    arrival = np.fromiter((r.arrival for r in reqs), np.float64, n)
    output = np.fromiter((r.output_tokens for r in reqs), np.int64, n)
    with_slo = [o for o in outs if o.request.slo is not None]
    no_slo = np.fromiter((r.slo is None for r in reqs), bool, n)
    met = int(np.count_nonzero(no_slo & ~np.isnan(finish))) + sum(o.meets_slo for o in with_slo)
    return metrics_of_arrays(arrival, output, first_token, finish, first_scheduled, met, makespan, evictions, batches)


def metrics_of_arrays(
    arrival: np.ndarray,
    output: np.ndarray,
    first_token: np.ndarray,
    finish: np.ndarray,
    first_scheduled: np.ndarray,
    met: int,
    makespan: float,
    evictions: int,
    batches: int,
) -> Metrics:
    """:func:`metrics_of_columns` from the requests' arrivals and output lengths as arrays, and
    ``met``, how many requests finished and met every SLO they carry (no object per request)."""
    n = len(arrival)
    latency, ttft, queue = finish - arrival, first_token - arrival, first_scheduled - arrival
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(output >= 2, (finish - first_token) / (output - 1), math.nan)
    values = {"ttft": ttft, "tpot": tpot, "latency": latency, "queue": queue}
    defined = {name: v[~np.isnan(v)] for name, v in values.items()}
    total_latency = math.fsum(latency.tolist())
    tokens = int(output.sum())
    n_tpot = len(defined["tpot"])
    return Metrics(
        makespan=makespan,
        mean_latency=total_latency / n,
        mean_ttft=math.fsum(ttft.tolist()) / n,
        mean_tpot=math.fsum(defined["tpot"].tolist()) / n_tpot if n_tpot else None,
        throughput=tokens / makespan if makespan > 0 else math.inf,
        evictions=evictions,
        slo_attainment=met / n,
        G=met / total_latency if total_latency > 0 else math.inf,
        batches=batches,
        total_latency=total_latency,
        goodput=met / makespan if makespan > 0 else math.inf,
        **_tails(defined),
    )
