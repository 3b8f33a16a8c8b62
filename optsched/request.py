"""Requests: :class:`Request` objects, and :class:`RequestColumns`, requests held as numpy columns.

A trace of a million rows loads as columns (:mod:`optsched.workload`): arrivals, prompt and output
lengths as arrays, the ids ``<prefix><k>`` from an integer column. :class:`RequestColumns` is a
read-only sequence of :class:`Request` over them: what reads every request's numbers
(:attr:`optsched.instance.Instance.columns`: the bounds, ``optsched info``, the compiled engine and
replay) reads the arrays; indexing one request builds that one; the first caller that iterates or
slices gets the same objects as an instance file's, built once for all requests and kept.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

import numpy as np

__all__ = ["NO_EXTRA", "SLO", "Request", "RequestColumns", "request_ids", "requests_from_columns"]


@dataclass(frozen=True)
class SLO:
    """Service-level objectives of a request, in seconds (any may be absent)."""

    ttft: float | None = None
    tpot: float | None = None
    e2e: float | None = None
    atgt: float | None = None

    def to_dict(self) -> dict[str, float]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


class _NoExtra(Mapping[str, Any]):
    """The read-only empty ``extra`` shared by every request without extension keys (a dict per
    request would cost 64 bytes each: 320 MB for a 5-million-request trace)."""

    __slots__ = ()

    def __getitem__(self, key: str) -> Any:
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return "{}"

    def __reduce__(self) -> str:
        return "NO_EXTRA"  # pickled by reference to the module's one instance


NO_EXTRA: Mapping[str, Any] = _NoExtra()


def _no_extra() -> Mapping[str, Any]:
    return NO_EXTRA


@dataclass(frozen=True, slots=True)
class Request:
    """One inference request.

    Attributes
    ----------
    id
        Unique string id.
    arrival
        Arrival time in seconds.
    prompt_tokens, output_tokens
        Prompt length I and true output length O.
    predicted_output_tokens
        What an online policy may see of O (None: unknown).
    slo
        Its SLOs, or None.
    extra
        The request's JSON keys outside the contract (formulation-specific extensions, e.g. the
        static-batching ``task``); kept verbatim and written back by :meth:`to_dict`.
    """

    id: str
    arrival: float
    prompt_tokens: int
    output_tokens: int
    predicted_output_tokens: int | None = None
    slo: SLO | None = None
    extra: Mapping[str, Any] = field(default_factory=_no_extra, compare=False)

    @property
    def max_kv(self) -> int:
        """Most KV slots the request ever holds: I + O - 1."""
        return self.prompt_tokens + self.output_tokens - 1

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "arrival": self.arrival,
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens,
        }
        if self.predicted_output_tokens is not None:
            out["predicted_output_tokens"] = self.predicted_output_tokens
        if self.slo is not None:
            out["slo"] = self.slo.to_dict()
        out.update(self.extra)
        return out


class _RequestBuilder:
    """The slot layout of :class:`Request` without its frozen ``__setattr__``: a request is written
    with plain attribute stores, then becomes a :class:`Request` by ``__class__`` assignment (which
    CPython allows between classes of identical slots). See :func:`requests_from_columns`."""

    __slots__ = Request.__slots__

    def __init__(self, id: str, arrival: float, prompt_tokens: int, output_tokens: int) -> None:
        self.id = id
        self.arrival = arrival
        self.prompt_tokens = prompt_tokens
        self.output_tokens = output_tokens
        self.predicted_output_tokens = None
        self.slo = None
        self.extra = NO_EXTRA
        self.__class__ = Request  # type: ignore[assignment]


def requests_from_columns(
    ids: Iterable[str], arrivals: Iterable[float], prompts: Iterable[int], outputs: Iterable[int]
) -> tuple[Request, ...]:
    """Requests without SLO or predicted length from parallel columns (a trace's rows).

    The same objects as ``Request(id, arrival, prompt, output)`` (tested), built about three times
    faster: a frozen dataclass sets each of its 7 slots through ``object.__setattr__``, which
    dominates loading a 5-million-row trace (docs/performance.md). The values are not validated:
    the caller has checked them.
    """
    return tuple(map(_RequestBuilder, ids, arrivals, prompts, outputs))  # type: ignore[arg-type]


class RequestColumns(Sequence[Request]):
    """Requests without SLO, predicted length or extension keys, held as columns.

    Parameters
    ----------
    arrival, prompt, output
        Arrival times (seconds) and prompt and output lengths, one entry per request; kept as
        read-only float64, int64 and int64 arrays (a writable array that owns its data is made
        read-only, not copied). The values are not validated: the caller has checked them.
    numbers
        Request ``k``'s id is ``f"{prefix}{numbers[k]}"`` (None: ``k``).
    prefix
        The ids' prefix.

    Equal to a tuple (or another sequence of this type) of the same :class:`Request` objects, and
    hashed as that tuple, so an :class:`~optsched.instance.Instance` compares the same whichever
    form its requests have.
    """

    __slots__ = ("arrival", "prompt", "output", "_numbers", "_prefix", "_ids", "_objects")

    def __init__(self, arrival: Any, prompt: Any, output: Any, numbers: Any = None, prefix: str = "row") -> None:
        self.arrival = _frozen(arrival, np.float64)
        self.prompt = _frozen(prompt, np.int64)
        self.output = _frozen(output, np.int64)
        self._numbers = None if numbers is None else _frozen(numbers, np.int64)
        lengths = {len(self.arrival), len(self.prompt), len(self.output)}
        if self._numbers is not None:
            lengths.add(len(self._numbers))
        if len(lengths) > 1:
            raise ValueError("RequestColumns: columns of different lengths")
        self._prefix = prefix
        self._ids: list[str] | None = None
        self._objects: tuple[Request, ...] | None = None

    @property
    def ids(self) -> list[str]:
        """The request ids, in order (built on first use and kept)."""
        if self._ids is None:
            numbers = range(len(self.arrival)) if self._numbers is None else self._numbers.tolist()
            prefix = self._prefix
            self._ids = [f"{prefix}{k}" for k in numbers]
        return self._ids

    @property
    def columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(arrivals, prompt lengths, output lengths), read-only arrays."""
        return self.arrival, self.prompt, self.output

    def objects(self) -> tuple[Request, ...]:
        """The :class:`Request` objects (built on first use and kept)."""
        if self._objects is None:
            self._objects = requests_from_columns(
                self.ids, self.arrival.tolist(), self.prompt.tolist(), self.output.tolist()
            )
        return self._objects

    def first_over(self, max_tokens: int, kv_capacity: int | None) -> tuple[Request, ...]:
        """The first request with a prompt or output over ``max_tokens`` or, given ``kv_capacity``,
        with I + O - 1 over it, as a one-tuple (empty when there is none); no other is built."""
        bad = (self.prompt > max_tokens) | (self.output > max_tokens)
        if kv_capacity is not None:
            bad |= self.prompt + self.output - 1 > kv_capacity
        return (self[int(np.argmax(bad))],) if bad.any() else ()

    def distinct_ids(self) -> bool:
        """Whether no two requests have the same id (increasing numbers, as a trace's, need no sort)."""
        numbers = self._numbers
        if numbers is None or (numbers[1:] > numbers[:-1]).all():
            return True
        ordered = np.sort(numbers)
        return bool((ordered[1:] != ordered[:-1]).all())

    def at_zero(self) -> RequestColumns:
        """The same requests, every one arriving at 0 (offline)."""
        return RequestColumns(np.zeros(len(self)), self.prompt, self.output, self._numbers, self._prefix)

    def __len__(self) -> int:
        return len(self.arrival)

    @overload
    def __getitem__(self, key: int) -> Request: ...

    @overload
    def __getitem__(self, key: slice) -> tuple[Request, ...]: ...

    def __getitem__(self, key: int | slice) -> Request | tuple[Request, ...]:
        if self._objects is None and not isinstance(key, slice):  # one request: built alone
            k = range(len(self))[key]
            rid = f"{self._prefix}{k if self._numbers is None else int(self._numbers[k])}"
            return Request(rid, float(self.arrival[k]), int(self.prompt[k]), int(self.output[k]))
        return self.objects()[key]

    def __iter__(self) -> Iterator[Request]:
        return iter(self.objects())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RequestColumns):
            if self._objects is None or other._objects is None:
                return len(self) == len(other) and self.ids == other.ids and _same_columns(self, other)
            return self._objects == other._objects
        if isinstance(other, tuple):
            return self.objects() == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.objects())

    def __add__(self, other: Iterable[Request]) -> tuple[Request, ...]:
        return self.objects() + tuple(other)

    def __radd__(self, other: Iterable[Request]) -> tuple[Request, ...]:
        return tuple(other) + self.objects()

    def __repr__(self) -> str:
        return f"RequestColumns({len(self)} requests)"

    def __reduce__(self) -> tuple[Any, ...]:
        return RequestColumns, (self.arrival, self.prompt, self.output, self._numbers, self._prefix)


def request_ids(requests: Sequence[Request]) -> list[str]:
    """The requests' ids, in order (of :class:`RequestColumns` without building its requests)."""
    return list(requests.ids) if isinstance(requests, RequestColumns) else [r.id for r in requests]


def _frozen(values: Any, dtype: Any) -> np.ndarray:
    """``values`` as a one-dimensional read-only array of ``dtype``: an array that owns its data is
    taken over (made read-only), any other copied unless it already is read-only."""
    array = np.asarray(values, dtype=dtype)
    if array.ndim != 1:
        raise ValueError("RequestColumns: columns must be one-dimensional")
    if array.flags.writeable:
        array = array if array.flags.owndata else array.copy()
        array.setflags(write=False)
    return array


def _same_columns(a: RequestColumns, b: RequestColumns) -> bool:
    """Equal values, compared as :class:`Request` fields compare (floats by value)."""
    return all(bool(np.array_equal(x, y)) for x, y in zip(a.columns, b.columns))
