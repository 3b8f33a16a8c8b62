"""Schedule files read as columns: Parquet (one row per item), and the contract's JSON at speed.

Parquet (docs/schedule.md, "Parquet schedules"): one row per item or eviction with the columns
``batch`` (int64, 0, 1, ... in order), ``request`` (string), ``tokens`` (int64; null on an
eviction row), ``evict`` (bool) and ``start`` (float64, the batch's ``start`` on each of its rows,
null for none); a batch with neither items nor evictions is one row whose ``request`` is null. The
file's key-value metadata ``optsched.schedule`` holds ``{"instance": ..., "meta": {...}}``.

JSON: decoded by msgspec into typed batches and items (the types check every field), and turned
into columns. Anything the fast path cannot vouch for (msgspec's refusal, a key that may be given
twice in one object, a float in ``meta`` that may have been an integer) makes :func:`read_columns`
return None, and the strict parser of :mod:`optsched.schedule` reads the file and names the fault:
one semantics.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from functools import cache
from itertools import chain
from operator import attrgetter
from pathlib import Path
from typing import Any

import numpy as np

from .arrownumpy import numpy_of
from .instance import MAX_ARRIVAL
from .jsonio import atomic_output, finite_json, gc_paused
from .schedcols import ScheduleColumns, columns_of_lists

__all__ = ["PARQUET_SUFFIX", "is_parquet_path", "read_columns", "write_parquet"]

#: The suffix of a Parquet schedule file (:func:`is_parquet_path`: in any case); any other is JSON.
PARQUET_SUFFIX = ".parquet"


def is_parquet_path(path: str | Path) -> bool:
    """Whether a schedule file is Parquet: its name ends in ``.parquet``, in any case (as a table's)."""
    return str(path).lower().endswith(PARQUET_SUFFIX)


#: The Parquet key-value metadata entry holding the instance name and ``meta``.
META_KEY = b"optsched.schedule"
_COLUMNS = ("batch", "request", "tokens", "evict", "start")
#: A float this large in ``meta`` may have been written as an integer (the strict reader keeps it one).
_INT64 = 2.0**63
_ID, _TOKENS = attrgetter("id"), attrgetter("tokens")

Read = tuple[str, Mapping[str, Any], ScheduleColumns]


def read_columns(path: str | Path, error: type[Exception]) -> Read | None:
    """``(instance name, meta, columns)`` of a schedule file, or None for a JSON file that the
    strict parser must read (module docstring); ``error`` names the file and the fault."""
    if is_parquet_path(path):
        return _read_parquet(path, error)
    try:
        raw = Path(path).read_bytes()
    except OSError:
        return None  # the strict reader names the fault
    with gc_paused():  # millions of acyclic objects: the collector's scans would double the time
        return _read_json(raw.removeprefix(b"\xef\xbb\xbf"))


# --------------------------------------------------------------------------- JSON


def _keys(value: Any) -> int:
    """Number of object keys in a parsed JSON value; -1 when it holds a float that may have been
    an integer beyond 64 bits."""
    if isinstance(value, dict | list):
        counts = list(map(_keys, value.values() if isinstance(value, dict) else value))
        return -1 if -1 in counts else sum(counts) + (len(value) if isinstance(value, dict) else 0)
    return -1 if isinstance(value, float) and abs(value) >= _INT64 else 0


@cache
def _json_decoders() -> tuple[Any, Any]:
    """msgspec decoders of a schedule's top level (values left raw) and of its ``batches``."""
    import msgspec

    unset = msgspec.UnsetType
    item = msgspec.defstruct("Item", [("id", str), ("tokens", int)], gc=False, forbid_unknown_fields=True)
    fields = [("items", list[item] | unset, msgspec.UNSET), ("evict", list[str] | unset, msgspec.UNSET)]
    fields.append(("start", float | None | unset, msgspec.UNSET))
    batch = msgspec.defstruct("Batch", fields, gc=False, forbid_unknown_fields=True)
    return msgspec.json.Decoder(dict[str, msgspec.Raw]), msgspec.json.Decoder(list[batch])


def _read_json(raw: bytes) -> Read | None:
    import msgspec

    top_level, batch_list = _json_decoders()
    try:
        data = top_level.decode(raw)
        batches = batch_list.decode(data["batches"])
        rest = {k: msgspec.json.decode(v) for k, v in data.items() if k != "batches"}
        top = _keys(rest)
    except (msgspec.MsgspecError, ValueError, KeyError, RecursionError):  # malformed, not UTF-8, too deep, ...
        return None
    meta, name = rest.get("meta") or {}, rest.get("instance", "")
    if not isinstance(meta, dict) or not isinstance(name, str) or set(rest) - {"instance", "meta"}:
        return None  # the strict parser names the field
    unset = msgspec.UNSET
    item_lists, evict_lists = [b.items for b in batches], [b.evict for b in batches]
    starts = [b.start for b in batches]
    # Every ':' outside strings separates a key from its value: as many as the decoded objects'
    # keys means that no object gave a key twice (msgspec keeps the last silently).
    batch_keys = 3 * len(batches) - item_lists.count(unset) - evict_lists.count(unset) - starts.count(unset)
    item_lists = [[] if x is unset else x for x in item_lists]
    evict_lists = [[] if x is unset else x for x in evict_lists]
    items = list(chain.from_iterable(item_lists))
    if top < 0 or raw.count(b":") != 1 + top + batch_keys + 2 * len(items):
        return None
    start = np.array([math.nan if s is None or s is unset else s for s in starts], np.float64)
    given = start[~np.isnan(start)]
    if len(given) and (not np.isfinite(given).all() or np.abs(given).max() > MAX_ARRIVAL):
        return None
    evicts = list(chain.from_iterable(evict_lists))
    ids, tokens = map(_ID, items), map(_TOKENS, items)
    try:
        columns = columns_of_lists(ids, tokens, list(map(len, item_lists)), evicts, list(map(len, evict_lists)), start)
    except OverflowError:  # a token count beyond 64 signed bits
        return None
    return name, meta, columns


# --------------------------------------------------------------------------- Parquet


def write_parquet(path: str | Path, instance: str, meta: Mapping[str, Any], columns: ScheduleColumns) -> None:
    """Write a schedule's columns as Parquet (module docstring), atomically."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    c = columns
    n_items, n_evict = np.diff(c.item_ptr), np.diff(c.evict_ptr)
    rows = n_items + n_evict + ((n_items + n_evict) == 0)
    row_ptr = np.concatenate(([0], np.cumsum(rows)))
    n_rows = int(row_ptr[-1])
    batch = np.repeat(np.arange(c.n_batches, dtype=np.int64), rows)
    request = np.full(n_rows, -1, np.int64)
    tokens = np.zeros(n_rows, np.int64)
    is_item = np.zeros(n_rows, bool)
    evict = np.zeros(n_rows, bool)
    e_batch = np.repeat(np.arange(c.n_batches), n_evict)
    e_rows = row_ptr[e_batch] + (np.arange(len(c.evict_ref)) - c.evict_ptr[e_batch])
    request[e_rows], evict[e_rows] = c.evict_ref, True
    i_batch = np.repeat(np.arange(c.n_batches), n_items)
    i_rows = row_ptr[i_batch] + n_evict[i_batch] + (np.arange(len(c.item_ref)) - c.item_ptr[i_batch])
    request[i_rows], tokens[i_rows], is_item[i_rows] = c.item_ref, c.item_tokens, True
    start = c.start[batch]
    table = pa.table(
        {
            "batch": batch,
            "request": pa.DictionaryArray.from_arrays(
                pa.array(request.astype(np.int32), mask=request < 0), pa.array(c.ids, pa.string())
            ),
            "tokens": pa.array(tokens, mask=~is_item),
            "evict": evict,
            "start": pa.array(start, mask=np.isnan(start)),
        },
    )
    text = json.dumps(finite_json({"instance": instance, "meta": dict(meta)}))
    table = table.replace_schema_metadata({META_KEY: text.encode()})
    with atomic_output(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")


def _read_parquet(path: str | Path, error: type[Exception]) -> Read:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:  # ParquetFile, not read_table: the latter's dataset module imports pandas
        with pq.ParquetFile(path) as file:
            table = file.read()
    except (OSError, pa.ArrowException) as exc:
        raise error(f"{path}: cannot read the Parquet schedule: {exc}") from None
    head = _parquet_head(path, table, error)
    got = {name: table.column(name) for name in _COLUMNS if name in table.column_names}
    missing = [name for name in _COLUMNS if name not in got]
    if missing:
        raise error(f"{path}: column(s) {missing} missing (a schedule has {list(_COLUMNS)})")
    kinds = {"batch": "an integer", "tokens": "an integer", "evict": "a boolean", "start": "a number"}
    for name, kind in kinds.items():
        t = got[name].type
        fits = {
            "an integer": pa.types.is_integer(t) and t != pa.uint64(),
            "a boolean": pa.types.is_boolean(t),
            "a number": pa.types.is_floating(t) or pa.types.is_integer(t) or pa.types.is_null(t),
        }[kind]
        if not fits:
            raise error(f"{path}: column '{name}': must be {kind} column, not {t}")
    request = got["request"]
    if pa.types.is_dictionary(request.type) and request.num_chunks > 1:
        request = request.unify_dictionaries()
    request = request.combine_chunks()
    if not pa.types.is_dictionary(request.type):
        request = request.dictionary_encode()
    if not pa.types.is_string(request.type.value_type) and not pa.types.is_large_string(request.type.value_type):
        raise error(f"{path}: column 'request': must hold strings, not {request.type.value_type}")
    return head[0], head[1], _parquet_columns(path, got, request, error)


def _parquet_head(path: str | Path, table: Any, error: type[Exception]) -> tuple[str, Mapping[str, Any]]:
    text = (table.schema.metadata or {}).get(META_KEY)
    if text is None:
        raise error(f"{path}: not an optsched schedule (no {META_KEY.decode()!r} metadata)")
    try:
        head = json.loads(text)
    except (ValueError, UnicodeDecodeError):
        head = None
    if not isinstance(head, dict) or not isinstance(head.get("meta", {}), dict):
        raise error(f"{path}: metadata {META_KEY.decode()!r}: must be a JSON object with 'instance' and 'meta'")
    return str(head.get("instance", "")), head.get("meta", {})


def _first_bad(path: str | Path, bad: np.ndarray, field: str, what: str, error: type[Exception]) -> None:
    if bad.any():
        raise error(f"{path}: row {int(np.argmax(bad))}: field '{field}': {what}")


def _regular_columns(got: dict[str, Any], request: Any) -> ScheduleColumns | None:
    """The columns of a table whose rows break no rule of :func:`_parquet_columns` and have no
    empty batch, checked by whole-column tests; None when any test fails (or an empty batch's row
    is present), for :func:`_parquet_columns` to name the fault."""
    import pyarrow as pa

    if got["batch"].null_count or got["evict"].null_count or request.null_count:
        return None
    batch = numpy_of(got["batch"])
    n = len(batch)
    step = np.diff(batch)
    if n and (batch[0] != 0 or step.min(initial=0) < 0 or step.max(initial=0) > 1):
        return None
    evict = numpy_of(got["evict"])
    if not np.array_equal(evict, numpy_of(got["tokens"].is_null())):  # tokens on the items only
        return None
    heads = np.concatenate(([0], np.flatnonzero(step) + 1)) if n else np.zeros(0, np.int64)
    start = numpy_of(got["start"].cast(pa.float64()), math.nan)
    batch_start = start[heads]
    if got["start"].null_count < n:
        rows = np.diff(np.append(heads, n))
        given = start[~numpy_of(got["start"].is_null())]  # a NaN value is not "no start"
        if not np.isfinite(given).all() or (len(given) and np.abs(given).max() > MAX_ARRIVAL):
            return None
        if not np.array_equal(np.repeat(batch_start, rows), start, equal_nan=True):
            return None
    n_evict = int(np.count_nonzero(evict))
    tokens, ref = numpy_of(got["tokens"], 0), numpy_of(request.indices)
    item_rows = ~evict if n_evict else slice(None)
    evicts = np.bincount(batch[evict], minlength=len(heads)) if n_evict else np.zeros(len(heads), np.int64)
    ids = tuple(request.dictionary.to_pylist())
    if None in ids:
        return None
    return ScheduleColumns(
        ids=ids,
        item_ptr=np.append(heads, n) - np.concatenate(([0], np.cumsum(evicts))),
        item_ref=ref[item_rows].astype(np.int64),
        item_tokens=tokens[item_rows].astype(np.int64),
        evict_ptr=np.concatenate(([0], np.cumsum(evicts))),
        evict_ref=ref[evict].astype(np.int64),
        start=batch_start,
    )


def _parquet_columns(path: str | Path, got: dict[str, Any], request: Any, error: type[Exception]) -> ScheduleColumns:
    """Check the rows (each fault names its row and field) and build the columns."""
    import pyarrow as pa

    if (regular := _regular_columns(got, request)) is not None:
        return regular
    for name in ("batch", "evict"):
        _first_bad(path, numpy_of(got[name].is_null()), name, "must not be null", error)
    batch = numpy_of(got["batch"]).astype(np.int64)
    evict = numpy_of(got["evict"])
    ref = numpy_of(request.indices, 0).astype(np.int64)
    no_request = numpy_of(request.is_null())
    no_tokens = numpy_of(got["tokens"].is_null())
    tokens = numpy_of(got["tokens"], 0).astype(np.int64)
    start = numpy_of(got["start"].cast(pa.float64()), math.nan)
    step = np.diff(batch, prepend=0)
    bad = (step < 0) | (step > 1)
    bad[:1] = batch[:1] != 0
    _first_bad(path, bad, "batch", "must be 0 on the first row and grow by 0 or 1 per row", error)
    first = np.concatenate(([True], step[1:] > 0)) if len(batch) else np.zeros(0, bool)
    last = np.concatenate((first[1:], [True])) if len(batch) else np.zeros(0, bool)
    alone = first & last
    _first_bad(path, no_request & ~(alone & ~evict & no_tokens), "request", "null only on an empty batch's row", error)
    _first_bad(path, ~no_request & evict & ~no_tokens, "tokens", "must be null on an eviction row", error)
    _first_bad(path, ~no_request & ~evict & no_tokens, "tokens", "must be an integer on an item row", error)
    batch_start = start[first]
    no_start = numpy_of(got["start"].is_null())  # null is "no start"; a NaN value is not
    _first_bad(path, ~(no_start | np.isfinite(start)), "start", "must be a finite number", error)
    _first_bad(path, np.abs(np.nan_to_num(start)) > MAX_ARRIVAL, "start", f"must lie within +-{MAX_ARRIVAL:g} s", error)
    same = np.repeat(batch_start, np.diff(np.flatnonzero(np.append(first, True))))
    _first_bad(path, ~((same == start) | (np.isnan(same) & np.isnan(start))), "start", "differs in one batch", error)
    n_b = int(first.sum())
    item_rows, evict_rows = ~no_request & ~evict, ~no_request & evict
    ids = tuple(request.dictionary.to_pylist())
    if None in ids:
        raise error(f"{path}: column 'request': its dictionary holds a null; a request id is a string")
    return ScheduleColumns(
        ids=ids,
        item_ptr=np.concatenate(([0], np.cumsum(np.bincount(batch[item_rows], minlength=n_b)))).astype(np.int64),
        item_ref=ref[item_rows],
        item_tokens=tokens[item_rows],
        evict_ptr=np.concatenate(([0], np.cumsum(np.bincount(batch[evict_rows], minlength=n_b)))).astype(np.int64),
        evict_ref=ref[evict_rows],
        start=batch_start,
    )
