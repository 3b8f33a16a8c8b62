"""Load a trace file in any format of :mod:`optsched.workload.formats` as an :class:`Instance`.

:func:`load_trace` reads the file (gzip transparently, UTF-8 with or without BOM, any line ends,
quoted fields, extra columns), picks the format from ``format=`` or the header (JSON Lines:
Mooncake), and returns the contract's instance: request ``row<k>`` for the k-th data row (0-based,
counting dropped rows, so ids point back into the file), arrivals in seconds after the earliest
loaded request (which arrives at 0), the lengths as given. The file's bytes are read once, within
the limits of :func:`~optsched.workload.readers.read_bytes`; every layout is parsed by pyarrow
(:mod:`optsched.workload.arrow`: the same rows, four to five times less CPU), and whatever it does
not vouch for (a value outside :mod:`optsched.integers`' grammar, a quoted line end, a blank line)
is read by the standard-library reader, which names every error. A bad value is a
:class:`~optsched.workload.errors.WorkloadError` naming the file, the line and the column.
What a format ignores or drops is said in the instance's ``notes`` (``Instance.extra``).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np

from ..costmodel import CostModel, CostModelError, load_cost_model
from ..instance import (
    MAX_ARRIVAL,
    Instance,
    Limits,
    RequestColumns,
    as_limits,
    check_requests,
)
from ..jsonio import gc_paused
from .arrow import arrow_available, read_csv_columns, read_jsonl_columns
from .errors import WorkloadError
from .formats import FORMATS, TraceFormat, check_header, detect_format, format_named
from .readers import (
    TICKS_PER_SECOND,
    BadValue,
    datetime_ticks,
    file_name,
    is_gzip_file,
    open_text,
    parse_count,
    parse_number,
    read_bytes,
    read_chunks,
    read_head,
    utf8_error,
)
from .streamed import TallyingStream

__all__ = ["is_trace_path", "load_trace", "load_trace_csv", "trace_format_of"]

#: Extensions read as traces by the command line (also with ``.gz``).
TRACE_EXTENSIONS = (".csv", ".jsonl")


def is_trace_path(path: str) -> bool:
    """Whether the command line reads ``path`` as a trace (``.csv``, ``.jsonl``, with or without ``.gz``)."""
    return path.removesuffix(".gz").endswith(TRACE_EXTENSIONS)


@dataclass
class _Rows:
    """What a reader collected: per kept row its index, raw time, lengths (lists, or numpy arrays
    from the fast path); and what it left out."""

    index: Any = field(default_factory=list)
    times: Any = field(default_factory=list)
    prompts: Any = field(default_factory=list)
    outputs: Any = field(default_factory=list)
    failed: int = 0
    other_models: dict[str, int] = field(default_factory=dict)

    def first(self, max_rows: int | None) -> _Rows:
        """The first ``max_rows`` kept rows (the counts of left-out rows are the whole file's)."""
        if max_rows is None or len(self.index) <= max_rows:
            return self
        cut = slice(0, max_rows)
        columns = (self.index[cut], self.times[cut], self.prompts[cut], self.outputs[cut])
        return _Rows(*columns, self.failed, self.other_models)


def _time_parser(fmt: TraceFormat) -> Callable[[str], Any]:
    return datetime_ticks if fmt.time_unit == "datetime" else parse_number


def _keep(rows: _Rows, fmt: TraceFormat, k: int, t: Any, prompt: int, output: int, where: str) -> None:
    """Validate one row's lengths and keep it (or count it as a failed request)."""
    if output == 0 and fmt.failed_if_no_output:
        rows.failed += 1
        return
    for column, value in ((fmt.prompt, prompt), (fmt.output, output)):
        if value < 1:
            raise WorkloadError(f"{where}, column {column!r}: must be an integer >= 1, got {value}")
    rows.index.append(k)
    rows.times.append(t)
    rows.prompts.append(prompt)
    rows.outputs.append(output)


def _text(data: bytes | bytearray) -> io.TextIOWrapper:
    """The file's bytes as UTF-8 text (a leading BOM dropped, line ends left to the csv module)."""
    return io.TextIOWrapper(io.BytesIO(data), encoding="utf-8-sig", errors="strict", newline="")


def _read(path: str, fmt: TraceFormat, model: str | None, max_rows: int | None) -> tuple[TraceFormat, _Rows]:
    """The file's rows: a gzip file streamed into pyarrow's reader (:func:`_read_streamed`) when it
    vouches for them, else the whole (gunzipped) bytes read by :func:`_read_jsonl` or :func:`_read_csv`."""
    if arrow_available() and is_gzip_file(path):
        streamed = _read_streamed(path, fmt, model, max_rows)
        if streamed is not None:
            return streamed
    data = read_bytes(path)
    if fmt.jsonl:
        return fmt, _read_jsonl(path, data, fmt, max_rows)
    return _read_csv(path, data, fmt, model, max_rows)


def _read_streamed(
    path: str, fmt: TraceFormat, model: str | None, max_rows: int | None
) -> tuple[TraceFormat, _Rows] | None:
    """A gzip file's rows as pyarrow reads them while the file is inflated (its content never held
    whole; :class:`~optsched.workload.streamed.TallyingStream`), or None for anything the
    whole-file path decides (a header it reads otherwise or refuses, a row pyarrow does not vouch
    for). A limit or damaged gzip data met while reading is its ``WorkloadError``."""
    if fmt.jsonl:
        columns = read_jsonl_columns(TallyingStream(read_chunks(path)), fmt)
    else:
        head = read_head(path)
        try:
            header = _header_line(head) if b"\n" in head else None
            if header is None or not header:
                return None
            check_header(header, path)
        except (UnicodeDecodeError, WorkloadError):
            return None  # read again, and named, by the whole-file path
        columns = read_csv_columns(TallyingStream(read_chunks(path)), header, fmt, model)
    return None if columns is None else (fmt, _Rows(**columns).first(max_rows))


def _read_csv(
    path: str, data: bytes | bytearray, fmt: TraceFormat | None, model: str | None, max_rows: int | None
) -> tuple[TraceFormat, _Rows]:
    reader: Any = None
    _refuse_nul(path, data)
    try:
        header = _header_line(data)
        if header is None:  # the header holds a quote (a field may run over the line end): the csv module reads it
            reader = csv.reader(_text(data))
            header = [h.strip() for h in next(reader, [])]
        if not header:
            raise WorkloadError(f"{path}: empty file (no header line)")
        check_header(header, path)
        fmt = fmt or detect_format(header, path)
        if arrow_available():
            columns = read_csv_columns(data, header, fmt, model)
            if columns is not None:
                return fmt, _Rows(**columns).first(max_rows)
        if reader is None:
            reader = csv.reader(_text(data))
            next(reader)
        return fmt, _csv_rows(path, reader, header, fmt, model, max_rows)
    except UnicodeDecodeError:
        raise utf8_error(path) from None
    except csv.Error as exc:
        raise WorkloadError(f"{path}: line {reader.line_num + 1 if reader else 1}: malformed CSV: {exc}") from None


def _refuse_nul(path: str, data: bytes | bytearray) -> None:
    """An error naming the line and the column of the first NUL byte (a damaged or binary file: the
    csv module reads it inside a field, so that the row seemed short); bytes before it that are not
    UTF-8 are left to the UTF-8 error."""
    at = data.find(b"\0")
    if at < 0:
        return
    try:
        before = bytes(data[:at]).decode("utf-8-sig")
    except UnicodeDecodeError:
        return
    line = before.count("\n") + 1
    column = len(before) - (before.rfind("\n") + 1) + 1
    raise WorkloadError(f"{path}: line {line}, column {column}: a NUL byte; a trace is UTF-8 text (a damaged file?)")


def _header_line(data: bytes | bytearray) -> list[str] | None:
    """The names of the first line (stripped; a leading BOM dropped), or None when it holds a quote
    or a carriage return before its end (line ends the csv module decides)."""
    end = data.find(b"\n")
    first = bytes(data[: len(data) if end < 0 else end])
    if b'"' in first or b"\r" in first.removesuffix(b"\r"):
        return None
    return [h.strip() for h in next(csv.reader([first.decode("utf-8-sig").rstrip("\r")]), [])]


def _csv_rows(
    path: str, reader: Any, header: list[str], fmt: TraceFormat, model: str | None, max_rows: int | None
) -> _Rows:
    """The data rows: a blank line is skipped; a row without a needed field, a row with more fields
    than the header (but empty ones at its end: the fields would be read by position, a number
    written ``1,000`` as two) or a bad value is an error naming it."""
    position = {name: k for k, name in enumerate(header)}  # distinct but empty ones, unread (check_header)
    needed = [*fmt.needed, *([fmt.model_column] if model is not None and fmt.model_column else [])]
    missing = [c for c in needed if c not in position]
    if missing:
        raise WorkloadError(f"{path}: line 1: missing column {missing[0]!r} (format {fmt.name!r} needs {needed})")
    at = position[fmt.arrival] if fmt.arrival else None
    ip, io_ = position[fmt.prompt], position[fmt.output]
    im = position[fmt.model_column] if model is not None and fmt.model_column else None
    width = max(position[c] for c in needed) + 1
    parse_time = _time_parser(fmt)
    rows = _Rows()
    k = -1
    line = reader.line_num
    for row in reader:
        if reader.line_num > line + 1:
            _quoted_line_end(path, line + 1, header, row)
        line = reader.line_num
        if not row or (len(row) == 1 and not row[0].strip()):
            continue  # blank line
        k += 1
        if len(row) < width or any(field.strip() for field in row[len(header) :]):  # a long row: "1,000" unquoted?
            raise WorkloadError(f"{path}: line {reader.line_num}: {len(row)} fields, the header has {len(header)}")
        if im is not None and row[im].strip() != model:
            name = row[im].strip()
            rows.other_models[name] = rows.other_models.get(name, 0) + 1
            continue
        column = fmt.arrival
        try:
            t = parse_time(row[at]) if at is not None else 0
            column = fmt.prompt
            prompt = parse_count(row[ip])
            column = fmt.output
            output = parse_count(row[io_])
        except BadValue as exc:
            raise WorkloadError(f"{path}: line {reader.line_num}, column {column!r}: {exc}") from None
        _keep(rows, fmt, k, t, prompt, output, f"{path}: line {reader.line_num}")
        if max_rows is not None and len(rows.index) >= max_rows:
            break
    return rows


def _quoted_line_end(path: str, line: int, header: list[str], row: list[str]) -> None:
    """A row read over several lines: a quoted field holds a line end (a stray quote swallows the
    rows after it), an error naming the line where the row starts and the field."""
    column = next((k for k, value in enumerate(row) if "\n" in value or "\r" in value), len(row) - 1)
    name = f" {header[column]!r}" if column < len(header) else ""
    raise WorkloadError(
        f"{path}: line {line}, column {column + 1}{name}: a quoted field runs over the line end "
        "(a stray quote?); trace fields never hold line ends"
    )


def _read_jsonl(path: str, data: bytes | bytearray, fmt: TraceFormat, max_rows: int | None) -> _Rows:
    if arrow_available():
        columns = read_jsonl_columns(data, fmt)
        if columns is not None:
            return _Rows(**columns).first(max_rows)
    rows = _Rows()
    k = -1
    try:
        for line, text in enumerate(_text(data), start=1):
            if not text.strip():
                continue
            k += 1
            try:
                obj = json.loads(text, object_pairs_hook=_object)
            except json.JSONDecodeError as exc:
                raise WorkloadError(f"{path}: line {line}, column {exc.colno}: malformed JSON: {exc.msg}") from None
            except RecursionError:
                raise WorkloadError(f"{path}: line {line}: JSON nested too deeply") from None
            if not isinstance(obj, dict):
                raise WorkloadError(f"{path}: line {line}: not a JSON object")
            twice = next((key for key in fmt.needed if key in getattr(obj, "twice", ())), None)
            if twice is not None:
                raise WorkloadError(
                    f"{path}: line {line}, field {twice!r}: given twice in one object (which value is meant "
                    "would be a guess)"
                )
            values = {key: _json_number(obj, key, f"{path}: line {line}, field {key!r}") for key in fmt.needed}
            t = values[fmt.arrival] if fmt.arrival else 0
            prompt, output = (
                _json_count(values[c], f"{path}: line {line}, field {c!r}") for c in (fmt.prompt, fmt.output)
            )
            _keep(rows, fmt, k, t, prompt, output, f"{path}: line {line}")
            if max_rows is not None and len(rows.index) >= max_rows:
                break
    except UnicodeDecodeError:
        raise utf8_error(path) from None
    return rows


class _KeyedTwice(dict[str, Any]):
    """A JSON object in which a key is given more than once (the last value kept, as ``json`` does);
    :attr:`twice` names those keys."""

    twice: frozenset[str] = frozenset()


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON Lines object; a :class:`_KeyedTwice` when a key repeats, so that the reader refuses a
    repeated field it reads (pyarrow's reader refuses those too; it ignores a repeat of another field)."""
    obj = dict(pairs)
    if len(obj) == len(pairs):
        return obj
    repeated = _KeyedTwice(obj)
    seen: set[str] = set()
    twice: set[str] = set()
    for key, _ in pairs:
        (twice if key in seen else seen).add(key)
    repeated.twice = frozenset(twice)
    return repeated


#: Largest magnitude of a JSON number read as a time or count (beyond 64-bit integers and any
#: millisecond clock; a larger value would overflow the arithmetic of the arrival times).
_MAX_JSON_NUMBER = 1e15


def _json_number(obj: Mapping[str, Any], key: str, where: str) -> float:
    value = obj.get(key)
    if value is None:
        raise WorkloadError(f"{where}: missing")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise WorkloadError(f"{where}: not a finite number ({str(value)[:40]!r})")
    if isinstance(value, int) and value.bit_length() > 64:
        digits = len(str(abs(value)))
        raise WorkloadError(f"{where}: out of range ({digits}-digit integer; at most {_MAX_JSON_NUMBER:g})")
    if not abs(value) <= _MAX_JSON_NUMBER:
        raise WorkloadError(f"{where}: not a finite number of magnitude at most {_MAX_JSON_NUMBER:g} ({value!r})")
    return value


def _json_count(value: float, where: str) -> int:
    if value != int(value):
        raise WorkloadError(f"{where}: not an integer ({value!r})")
    return int(value)


def _relative_arrivals(path: str, fmt: TraceFormat, rows: _Rows) -> np.ndarray:
    """Seconds after the earliest time; exact differences of integer ticks and milliseconds,
    correctly rounded divisions (the same numbers as Python's arithmetic on each row)."""
    if fmt.arrival is None:
        return np.zeros(len(rows.index))
    times = np.asarray(rows.times, dtype=np.int64 if fmt.time_unit == "datetime" else np.float64)
    arrivals: np.ndarray
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is the out-of-range error below
        relative = times - times.min()
        if fmt.time_unit == "datetime":
            arrivals = relative / TICKS_PER_SECOND
        elif fmt.time_unit == "ms":
            arrivals = relative / 1000
        else:
            arrivals = relative
    late = int(np.argmax(np.nan_to_num(arrivals, nan=np.inf)))
    if not arrivals[late] <= MAX_ARRIVAL:
        finite = bool(np.isfinite(arrivals[late]))
        raise WorkloadError(
            f"{path}: line {_line_of_row(path, fmt, int(rows.index[late]))}, column {fmt.arrival!r}: arrives "
            + (
                f"{arrivals[late]:g} s after the first request (more than {MAX_ARRIVAL:g} s)"
                if finite
                else f"more than {MAX_ARRIVAL:g} s after the first request"
            )
        )
    return arrivals


def _line_of_row(path: str, fmt: TraceFormat, k: int) -> int:
    """The line of the k-th data row (0-based; blank lines are not rows), found by reading again."""
    with open_text(path) as fh:
        if fmt.jsonl:
            lines = (n for n, text in enumerate(fh, start=1) if text.strip())
            return next(n for j, n in enumerate(lines) if j == k)
        reader = csv.reader(fh)
        next(reader)
        j = -1
        for row in reader:
            if row and not (len(row) == 1 and not row[0].strip()):
                j += 1
                if j == k:
                    return reader.line_num
    return 0


def _notes(path: str, fmt: TraceFormat, rows: _Rows, model: str | None) -> list[str]:
    notes = [f"{path}: {note}" for note in fmt.notes]
    if rows.failed:
        notes.append(f"{path}: {rows.failed} rows with 0 {fmt.output} (failed requests) dropped")
    if model is not None and rows.other_models:
        count = sum(rows.other_models.values())
        notes.append(f"{path}: {count} rows of other models than {model!r} left out")
    return notes


#: Bytes read to detect a format (the header line must end within them).
_HEAD_BYTES = 65536


def trace_format_of(path: str | Path, format: str | None = None) -> TraceFormat:
    """The format ``path`` is read in: ``format`` by name, else detected from its first bytes."""
    if format is not None:
        return format_named(format)
    source = str(path)
    head = read_head(source)
    if head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{"):
        return FORMATS["mooncake"]
    text = head.decode("utf-8-sig", errors="replace")
    if not text.strip():
        raise WorkloadError(f"{source}: empty file (no header line)")
    lines = text.splitlines()
    if len(lines) == 1 and len(head) == _HEAD_BYTES:
        raise WorkloadError(f"{source}: line 1: no line end in the first {_HEAD_BYTES:,} bytes (not a trace's header)")
    header = [h.strip() for h in next(csv.reader([lines[0]]), [])]
    if not any(header):
        raise WorkloadError(f"{source}: line 1: blank; the header must be the first line")
    return detect_format(header, source)


def load_trace(
    path: str | Path,
    cost_model: str | Mapping[str, Any] | CostModel,
    limits: Limits | Mapping[str, Any] | None = None,
    *,
    format: str | None = None,
    name: str | None = None,
    max_rows: int | None = None,
    check_capacity: bool = True,
    **format_options: Any,
) -> Instance:
    """Read a trace file as an instance.

    Parameters
    ----------
    path
        The trace (``.gz`` or not; the name does not matter, the content does).
    cost_model
        Profile name, inline mapping or :class:`CostModel`.
    limits
        Engine limits: a :class:`~optsched.instance.Limits` or a mapping of the contract's
        ``limits`` keys (missing keys: the contract's defaults).
    format
        A name of :data:`~optsched.workload.formats.FORMATS`; None detects it from the header.
    name
        Instance name (default: the file name without its extensions).
    max_rows
        Stop after this many requests (what ``--first`` reads of a large file).
    check_capacity
        As in :func:`~optsched.instance.parse_instance`.
    format_options
        ``model=NAME``: keep only this model's rows (formats with a model column: ``burstgpt``).

    Raises
    ------
    WorkloadError
        Naming the file, the line and the column.
    """
    source = str(path)
    limits = as_limits(limits, source)
    fmt = trace_format_of(source, format)
    model = format_options.pop("model", None)
    if format_options:
        raise WorkloadError(f"{source}: unknown trace option(s) {sorted(format_options)}")
    if model is not None and fmt.model_column is None:
        raise WorkloadError(f"--model: applies only to a trace with a model column (format {fmt.name!r} has none)")
    with gc_paused():
        fmt, rows = _read(source, fmt, model, max_rows)
        if not len(rows.index):
            seen = f" (models in the file: {', '.join(sorted(rows.other_models))})" if rows.other_models else ""
            raise WorkloadError(f"{source}: no requests{seen}")
        arrivals = _relative_arrivals(source, fmt, rows)
        index = np.asarray(rows.index, dtype=np.int64)
        contiguous = len(index) == 0 or int(index[-1]) == len(index) - 1  # no row dropped: ids row0, row1, ...
        prompts, outputs = np.asarray(rows.prompts, dtype=np.int64), np.asarray(rows.outputs, dtype=np.int64)
        requests = RequestColumns(arrivals, prompts, outputs, None if contiguous else index)
    try:
        cost = load_cost_model(cost_model)
    except CostModelError as exc:
        raise WorkloadError(f"{source}: {exc}") from None
    check_requests(requests, limits, source, check_capacity, check_ids=False)  # on the columns
    extra: dict[str, Any] = {"source": f"{fmt.name} trace {Path(source).name}"}
    notes = _notes(source, fmt, rows, model)
    if notes:
        extra["notes"] = notes
    return Instance(name or file_name(source), cost, limits, requests, extra)


def load_trace_csv(
    path: str | Path,
    cost_model: str | Mapping[str, Any] | CostModel,
    limits: Limits | Mapping[str, Any] | None = None,
    *,
    name: str | None = None,
    first: int | None = None,
    offline: bool = False,
    check_capacity: bool = True,
) -> Instance:
    """A trace in any format (:func:`load_trace`), its first ``first`` requests, offline on request.

    The name is the file's with ``-<first>`` when sliced.
    """
    inst = load_trace(path, cost_model, limits, name=name, max_rows=first, check_capacity=check_capacity)
    if offline:
        inst = inst.with_requests(cast(RequestColumns, inst.requests).at_zero())  # load_trace's are columns
    if first is not None and name is None:
        inst = inst.with_requests(inst.requests, name=f"{inst.name}-{first}")
    return inst
