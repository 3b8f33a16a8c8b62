"""Instances: requests, limits and cost model (the contract's instance: docs/instances.md).

An :class:`Instance` is immutable. It is read from the contract's JSON (:func:`load_instance`,
:func:`parse_instance`); trace files load through :mod:`optsched.workload`. Validation
is done by pydantic; every error becomes an :class:`InstanceError` whose message names the file,
the request (by id) and the field.

Formulations that extend the instance (placement, static batching) read their own top-level keys
from :attr:`Instance.extra`, the parsed JSON object less the contract's keys.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache, cached_property
from importlib import resources
from numbers import Integral, Real
from os import PathLike
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from .costmodel import CostModel, CostModelError, load_cost_model
from .jsonio import dumps_instance, read_json, write_text_atomic
from .request import NO_EXTRA, SLO, Request, RequestColumns, requests_from_columns

__all__ = [
    "NO_EXTRA",
    "SLO",
    "Instance",
    "INT64_NO_LIMIT",
    "InstanceError",
    "Limits",
    "MAX_LIMIT",
    "MAX_RUNNING",
    "MAX_TOKENS",
    "Request",
    "RequestColumns",
    "as_limits",
    "available_instances",
    "check_instance",
    "check_requests",
    "load_instance",
    "requests_from_columns",
    "parse_instance",
]

DEFAULT_TOKEN_BUDGET = 4096

#: Latest arrival (seconds, about 31.7 years). Batch times are micro- to milliseconds; beyond
#: this a float time loses the resolution the replay's comparisons need (at 1e300 s every batch
#: of a millisecond ends where it starts), so a later arrival is bad input, not a time.
MAX_ARRIVAL = 1e9

#: Most tokens a request's prompt or output may have (ten million: the longest context windows).
#: The bounds and the simulators hold per-token arrays and loops; 10^7 tokens take seconds and
#: about a gigabyte, 10^9 exhausted the memory, so a larger count is bad input.
MAX_TOKENS = 10**7

#: Largest value of a token limit (token budgets, KV capacity): 10^15, far beyond any engine (an
#: H200 holds about 10^6 KV tokens of a 7B model; 10^12 is a common way to write "unlimited"), and
#: within the 64-bit integers of the kernels and of the sweep store (10^30 made the InferMax solve
#: fail with an OverflowError).
MAX_LIMIT = 10**15

#: Most requests that may hold KV at once (``max_running``): a million, beyond any engine (vLLM's
#: ``max_num_seqs`` is in the hundreds). The hybrid policies keep per-client state for J =
#: ``max_running`` clients (1.6 GB and 17 s for toy-4 at 10^6; 10^11 exhausted the memory).
MAX_RUNNING = 10**6


class InstanceError(ValueError):
    """Bad instance input; the message names the file, the request and the field."""


#: An absent limit as a 64-bit integer (:meth:`Limits.as_int64`).
INT64_NO_LIMIT = 2**62


@dataclass(frozen=True)
class Limits:
    """Engine limits: C, P, M and R_max (None = unlimited)."""

    token_budget: int = DEFAULT_TOKEN_BUDGET
    prefill_budget: int = DEFAULT_TOKEN_BUDGET
    kv_capacity: int | None = None
    max_running: int | None = None

    def to_dict(self) -> dict[str, int | None]:
        return dict(self.__dict__)

    @property
    def unbounded_residency(self) -> bool:
        """Whether neither a KV capacity nor a running limit bounds what the running requests hold."""
        return self.kv_capacity is None and self.max_running is None

    def as_int64(self) -> tuple[int, int, int, int]:
        """C, P, M and R_max as the compiled kernels read them: 64-bit integers, an absent (or
        astronomically large) limit as :data:`INT64_NO_LIMIT`, which no count reaches."""
        values = (self.token_budget, self.prefill_budget, self.kv_capacity, self.max_running)
        c, p, m, r = (INT64_NO_LIMIT if v is None else min(v, INT64_NO_LIMIT) for v in values)
        return c, p, m, r


#: Key of :meth:`Instance.checked`'s mark in an instance's ``__dict__``.
_CHECKED = "_checked"


@dataclass(frozen=True)
class Instance:
    """A scheduling instance: named requests under limits and a cost model.

    Attributes
    ----------
    name
        Instance name (schedules refer to it).
    cost_model
        The iteration cost model.
    limits
        Engine limits.
    requests
        The requests, in file order: a tuple, or a :class:`~optsched.request.RequestColumns` (a
        loaded trace's), which builds its :class:`Request` objects when first asked for one.
    extra
        Top-level JSON keys outside the contract (formulation-specific extensions).
    """

    name: str
    cost_model: CostModel
    limits: Limits
    requests: tuple[Request, ...] | RequestColumns
    extra: Mapping[str, Any] = field(default_factory=dict)

    @cached_property
    def _index(self) -> dict[str, int]:
        """Request id -> position, built on first use (a large trace may never need it)."""
        if isinstance(self.requests, RequestColumns):
            return {rid: i for i, rid in enumerate(self.requests.ids)}
        return {r.id: i for i, r in enumerate(self.requests)}

    @cached_property
    def columns(self) -> tuple[Any, Any, Any]:
        """(arrivals, prompt lengths, output lengths) of :attr:`requests` as read-only numpy arrays
        (float64, int64, int64), built on first use and kept: the figures over every request
        (:mod:`optsched.bounds`, ``optsched info``) read them instead of the request objects."""
        from operator import attrgetter

        import numpy as np

        if isinstance(self.requests, RequestColumns):
            return self.requests.columns
        n = len(self.requests)
        arrival, prompt, output = (
            np.fromiter(map(attrgetter(name), self.requests), dtype, n)
            for name, dtype in (("arrival", np.float64), ("prompt_tokens", np.int64), ("output_tokens", np.int64))
        )
        for array in (arrival, prompt, output):
            array.setflags(write=False)
        return arrival, prompt, output

    def index(self, request_id: str) -> int:
        """Position of a request id in :attr:`requests` (KeyError if unknown)."""
        return self._index[request_id]

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._index

    def checked(self) -> Instance:
        """This instance, checked by :func:`check_instance` (once per object; an instance read by
        :func:`parse_instance` passes as read)."""
        if not self.__dict__.get(_CHECKED):
            check_instance(self)
            self.__dict__[_CHECKED] = True  # beside the cached properties: not a field, not compared
        return self

    def with_requests(self, requests: Sequence[Request], name: str | None = None) -> Instance:
        """A copy with other requests (e.g. a slice of a trace; a :class:`RequestColumns` is kept as
        it is); not checked here (:meth:`checked`)."""
        kept = requests if isinstance(requests, RequestColumns) else tuple(requests)
        return replace(self, requests=kept, name=name or self.name)

    def to_dict(self) -> dict[str, Any]:
        """The contract's JSON object (the cost model by name when it is a shipped profile)."""
        model: Any = self.cost_model.name
        if model == "inline":
            model = self.cost_model.to_dict()
        return {
            "name": self.name,
            "cost_model": model,
            "limits": self.limits.to_dict(),
            "requests": [r.to_dict() for r in self.requests],
            **self.extra,
        }

    def save(self, path: str | Path) -> None:
        """Write the instance JSON atomically, one request per line."""
        write_text_atomic(path, dumps_instance(self.to_dict()))


# --------------------------------------------------------------------------- JSON schema


@cache
def _schema() -> Any:
    """The pydantic models of the instance JSON (``slo``, ``request``, ``limits``, ``instance``) and
    pydantic's ``ValidationError`` (``error``), built on first use: loading a trace needs none of them."""
    from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

    class _SLOModel(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True)  # a number, never a boolean or a string
        ttft: float | None = Field(default=None, gt=0, allow_inf_nan=False)
        tpot: float | None = Field(default=None, gt=0, allow_inf_nan=False)
        e2e: float | None = Field(default=None, gt=0, allow_inf_nan=False)
        atgt: float | None = Field(default=None, gt=0, allow_inf_nan=False)

    class _RequestModel(BaseModel):
        model_config = ConfigDict(extra="allow")
        id: str = Field(min_length=1)
        arrival: float = Field(default=0.0, ge=0, le=MAX_ARRIVAL, allow_inf_nan=False, strict=True)
        prompt_tokens: int = Field(ge=1, strict=True)
        output_tokens: int = Field(ge=1, strict=True)
        predicted_output_tokens: int | None = Field(default=None, ge=1, strict=True)
        slo: _SLOModel | None = None

        @field_validator("id", mode="before")
        @classmethod
        def _id_is_string(cls, value: Any) -> Any:
            if not isinstance(value, str):
                raise ValueError("must be a string")
            return value

    class _LimitsModel(BaseModel):
        model_config = ConfigDict(extra="forbid")
        token_budget: int = Field(default=DEFAULT_TOKEN_BUDGET, ge=1, le=MAX_LIMIT, strict=True)
        prefill_budget: int | None = Field(default=None, ge=1, le=MAX_LIMIT, strict=True)
        kv_capacity: int | None = Field(default=None, ge=1, le=MAX_LIMIT, strict=True)
        max_running: int | None = Field(default=None, ge=1, le=MAX_RUNNING, strict=True)

    class _InstanceModel(BaseModel):
        model_config = ConfigDict(extra="allow")
        name: str = Field(min_length=1)
        cost_model: str | dict[str, Any]
        limits: _LimitsModel = Field(default_factory=_LimitsModel)
        requests: list[_RequestModel] = Field(min_length=1)

    return SimpleNamespace(
        slo=_SLOModel, request=_RequestModel, limits=_LimitsModel, instance=_InstanceModel, error=ValidationError
    )


def as_limits(value: Limits | Mapping[str, Any] | None, source: str = "limits") -> Limits:
    """A :class:`Limits` from a ``Limits``, a mapping with the keys of the contract's ``limits``
    object (missing keys take the contract's defaults; ``prefill_budget`` defaults to
    ``token_budget``) or None (every default), validated as in an instance file.

    Raises
    ------
    InstanceError
        On an unknown key or a value out of range, naming ``source`` and the field.
    """
    if isinstance(value, Limits):
        return value
    if value is None:
        return Limits()
    if not isinstance(value, Mapping):
        raise InstanceError(f"{source}: must be a Limits or a mapping, got {type(value).__name__}")
    schema = _schema()
    try:
        lim = schema.limits.model_validate(dict(value))
    except schema.error as exc:
        error = exc.errors()[0]
        field = ".".join(str(part) for part in error["loc"])
        raise InstanceError(f"{source}: field 'limits.{field}': {error['msg']}") from None
    return _limits_of(lim, source)


def _limits_of(lim: Any, source: str) -> Limits:
    """The :class:`Limits` of validated ``limits`` (P defaults to C; P <= C checked)."""
    prefill_budget = lim.prefill_budget if lim.prefill_budget is not None else lim.token_budget
    if prefill_budget > lim.token_budget:
        raise InstanceError(
            f"{source}: field 'limits.prefill_budget': {prefill_budget} exceeds token_budget "
            f"{lim.token_budget} (P <= C)"
        )
    return Limits(lim.token_budget, prefill_budget, lim.kv_capacity, lim.max_running)


def _describe(loc: tuple[Any, ...], raw: Mapping[str, Any]) -> str:
    """Turn a pydantic location into "request 'r3': field 'prompt_tokens'"."""
    if len(loc) >= 2 and loc[0] == "requests" and isinstance(loc[1], int):
        reqs = raw.get("requests") or []
        rid = reqs[loc[1]].get("id") if isinstance(reqs[loc[1]], Mapping) else None
        who = f"request {rid!r}" if isinstance(rid, str) else f"request #{loc[1]}"
        rest = ".".join(str(p) for p in loc[2:])
        return f"{who}: field {rest!r}" if rest else who
    return "field " + repr(".".join(str(p) for p in loc))


def _first_error(exc: Any, raw: Mapping[str, Any], source: str, at: tuple[Any, ...] = ()) -> InstanceError:
    """The first of pydantic's errors ``exc`` about ``raw`` (found at ``at`` in the instance), named."""
    err = exc.errors()[0]
    msg = err["msg"]
    if err["type"] == "missing":
        msg = "missing"
    return InstanceError(f"{source}: {_describe((*at, *err['loc']), raw)}: {msg}")


def parse_instance(data: Any, source: str = "<instance>", *, check_capacity: bool = True) -> Instance:
    """Validate a parsed JSON object and build an :class:`Instance`.

    Parameters
    ----------
    data
        The parsed JSON object.
    source
        File name used in error messages.
    check_capacity
        Reject requests that can never fit in ``kv_capacity`` (the contract's rule). Only
        diagnostic tools (``optsched info``) turn this off, to list every such request.

    Raises
    ------
    InstanceError
        On any violation of docs/instances.md, naming the file, request and field.
    """
    if not isinstance(data, Mapping):
        raise InstanceError(f"{source}: the instance must be a JSON object")
    schema = _schema()
    try:
        model = schema.instance.model_validate(data)
    except schema.error as exc:
        raise _first_error(exc, data, source) from None
    try:
        cost = load_cost_model(model.cost_model)
    except CostModelError as exc:
        raise InstanceError(f"{source}: {exc}") from None

    limits = _limits_of(model.limits, source)
    requests = tuple(
        Request(
            id=r.id,
            arrival=r.arrival,
            prompt_tokens=r.prompt_tokens,
            output_tokens=r.output_tokens,
            predicted_output_tokens=r.predicted_output_tokens,
            slo=SLO(**r.slo.model_dump()) if r.slo is not None else None,
            extra=dict(r.model_extra) if r.model_extra else NO_EXTRA,
        )
        for r in model.requests
    )
    check_requests(requests, limits, source, check_capacity)
    extra = {k: v for k, v in data.items() if k not in schema.instance.model_fields}
    _reject_misspelt_keys(extra, schema.instance.model_fields, source, "")
    for r in requests:
        _reject_misspelt_keys(r.extra, schema.request.model_fields, source, f"request {r.id!r}: ")
    instance = Instance(model.name, cost, limits, requests, extra)
    if check_capacity:
        instance.__dict__[_CHECKED] = True  # as checked as check_instance would
    return instance


def _reject_misspelt_keys(extra: Mapping[str, Any], known: Iterable[str], source: str, who: str) -> None:
    """Reject an extension key that is a near miss of a contract key (``arival``, ``slos``).

    Keys outside the contract are kept for formulations (``Instance.extra``), so a misspelt
    optional field would otherwise be silently ignored: the request would arrive at 0 or carry no SLO.
    """
    for key in extra:
        close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.8)
        if close:
            raise InstanceError(f"{source}: {who}field {key!r}: unknown field; did you mean {close[0]!r}?")


def _too_many_tokens(r: Request, source: str) -> None:
    for field_name in ("prompt_tokens", "output_tokens", "predicted_output_tokens"):
        value = getattr(r, field_name)
        if value is not None and value > MAX_TOKENS:
            raise InstanceError(
                f"{source}: request {r.id!r}: field {field_name!r}: {value} exceeds "
                f"{MAX_TOKENS:,} tokens, the most a request may have"
            )


def check_requests(
    requests: Sequence[Request], limits: Limits, source: str, check_capacity: bool = True, *, check_ids: bool = True
) -> None:
    """Token counts of at most :data:`MAX_TOKENS`, unique ids (unless ``check_ids`` is False: the
    caller made them unique) and, with ``check_capacity``, every request able to fit in ``kv_capacity``.

    Raises
    ------
    InstanceError
        Naming the file, the request and the field.
    """
    if isinstance(requests, RequestColumns) and (not check_ids or requests.distinct_ids()):
        requests = requests.first_over(MAX_TOKENS, limits.kv_capacity if check_capacity else None)  # on the columns
    seen: set[str] = set()
    for r in requests:
        if max(r.prompt_tokens, r.output_tokens, r.predicted_output_tokens or 0) > MAX_TOKENS:
            _too_many_tokens(r, source)
        if check_ids:
            if r.id in seen:
                raise InstanceError(f"{source}: request {r.id!r}: field 'id': duplicate id")
            seen.add(r.id)
        if check_capacity and limits.kv_capacity is not None and r.max_kv > limits.kv_capacity:
            raise InstanceError(
                f"{source}: request {r.id!r}: field 'prompt_tokens': prompt_tokens + output_tokens - 1"
                f" = {r.max_kv} exceeds limits.kv_capacity = {limits.kv_capacity}; it can never finish"
            )


def check_instance(instance: Instance) -> None:
    """Check an :class:`Instance` built in code by the rules of an instance file (docs/instances.md):
    a non-empty string name, a :class:`~optsched.costmodel.CostModel`, limits, at least one request,
    each request's fields (a quick look at each; the file's schema names what it finds unusual), then
    :func:`check_requests` (token counts, unique ids, KV capacity). A loaded trace's columns were
    checked by its loader; their ids, token counts and capacity are checked here again. The optsched
    API (:func:`optsched.solve`, ``bound``, ``simulate``) calls it once per instance object
    (:meth:`Instance.checked`).

    Raises
    ------
    InstanceError
        Naming the instance, the request and the field.
    """
    if not isinstance(instance.name, str) or not instance.name:
        got = repr(instance.name)[:40] if isinstance(instance.name, str) else type(instance.name).__name__
        raise InstanceError(f"instance: field 'name': must be a non-empty string, got {got}")
    source = f"instance {instance.name!r}"
    if not isinstance(instance.cost_model, CostModel):
        kind = type(instance.cost_model).__name__
        hint = " (load_cost_model(NAME) makes one from a profile name)" if isinstance(instance.cost_model, str) else ""
        raise InstanceError(f"{source}: field 'cost_model': a CostModel, got {kind}{hint}")
    if not isinstance(instance.limits, Limits):
        raise InstanceError(f"{source}: field 'limits': a Limits, got {type(instance.limits).__name__}")
    as_limits(instance.limits.to_dict(), source)
    if not len(instance.requests):
        raise InstanceError(f"{source}: field 'requests': no request (an instance has at least one)")
    if not isinstance(instance.requests, RequestColumns):
        for k, r in enumerate(instance.requests):
            if not isinstance(r, Request):
                raise InstanceError(f"{source}: request #{k}: a Request, got {type(r).__name__}")
            if not _usual(r):
                _check_fields(r, k, source)
    check_requests(instance.requests, instance.limits, source)


def _usual(r: Request) -> bool:
    """Whether every field of ``r`` has the usual type and lies in range (the quick look of
    :func:`check_instance`; what fails it goes to the schema, which decides)."""
    whole = (r.prompt_tokens, r.output_tokens) + (
        () if r.predicted_output_tokens is None else (r.predicted_output_tokens,)
    )
    slo = r.slo
    return (
        type(r.id) is str
        and r.id != ""
        and all(isinstance(v, Integral) and not isinstance(v, bool) and v >= 1 for v in whole)
        and isinstance(r.arrival, Real)
        and not isinstance(r.arrival, bool)
        and 0 <= r.arrival <= MAX_ARRIVAL
        and isinstance(r.extra, Mapping)
        and (
            slo is None
            or type(slo) is SLO
            and all(
                v is None or isinstance(v, Real) and not isinstance(v, bool) and 0 < v < math.inf
                for v in (slo.ttft, slo.tpot, slo.e2e, slo.atgt)
            )
        )
    )


def _check_fields(r: Request, k: int, source: str) -> None:
    """Request ``r`` (the ``k``-th) validated by the instance file's schema; raises what it finds."""
    for name, kind in (("slo", (SLO, type(None))), ("extra", Mapping)):
        if not isinstance(getattr(r, name), kind):
            raise InstanceError(f"{source}: request #{k}: field {name!r}: of type {type(getattr(r, name)).__name__}")
    data = r.to_dict()
    raw = {"requests": [data]}
    schema = _schema()
    try:
        schema.request.model_validate(data)
    except schema.error as exc:
        raise _first_error(exc, raw, source, ("requests", 0)) from None


def load_instance(path: str | Path, *, check_capacity: bool = True) -> Instance:
    """Read an instance JSON file, or a shipped instance by name (see :func:`available_instances`).

    ``check_capacity`` is passed to :func:`parse_instance`. A relative ``.toml`` path in its
    ``cost_model`` is read from the instance file's folder.

    Raises
    ------
    InstanceError
        When the name is empty, the file is missing, is not UTF-8 JSON
        (:func:`optsched.jsonio.read_json`), or violates the contract.
    TypeError
        When ``path`` is not a file name (data is read by :func:`parse_instance`).
    """
    if not isinstance(path, (str, PathLike)):
        raise TypeError(f"path: a file or a shipped instance's name, got {type(path).__name__}")
    path_str = str(path)
    if not path_str:
        raise InstanceError("an instance file name is empty")
    p = Path(path_str)
    if not p.exists() and not path_str.endswith(".json"):
        shipped = resources.files("optsched.data_instances").joinpath(f"{path_str}.json")
        if shipped.is_file():
            return parse_instance(json.loads(shipped.read_text()), path_str, check_capacity=check_capacity)
    if not p.exists() and not path_str.endswith(".json"):
        raise InstanceError(
            f"{path_str}: no such file and no shipped instance of that name"
            f" (shipped: {', '.join(available_instances())})"
        )
    data = read_json(p, InstanceError)
    model = data.get("cost_model") if isinstance(data, dict) else None
    if isinstance(model, str) and model.endswith(".toml") and not Path(model).is_absolute():
        data = {**data, "cost_model": str(p.parent / model)}  # a profile file beside the instance
    return parse_instance(data, path_str, check_capacity=check_capacity)


def available_instances() -> list[str]:
    """Names of the instances shipped in ``instances/``."""
    root = resources.files("optsched.data_instances")
    return sorted(p.name[: -len(".json")] for p in root.iterdir() if p.name.endswith(".json"))
