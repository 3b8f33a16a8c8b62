"""The fast path of the trace loaders: pyarrow parses the columns, numpy checks them.

:func:`read_csv_columns` reads a CSV trace, :func:`read_jsonl_columns` a JSON Lines one, from the
file's bytes (read once, within the limits of :func:`~optsched.workload.readers.read_bytes`). Each
returns exactly the rows of the standard-library reader (the tests compare both on every format),
or None whenever anything is off: a parse or conversion error, a value outside the grammar of
:mod:`optsched.integers` (pyarrow's integers are the grammar's but for hexadecimal, ``0x64``: the
counts of a file whose rows hold an ``x`` are read as strings and checked as ASCII digits), a
value out of range, a row count that differs from the file's line count (a quote that runs over
line ends, a blank line). The standard-library reader then reads the file and names the line and
the column of the problem. The file must be UTF-8, like everywhere else: it is checked first.
"""

from __future__ import annotations

import codecs
from typing import Any

import numpy as np

from ..arrownumpy import numpy_of
from .formats import TraceFormat
from .readers import READ_CHUNK, TICKS_PER_SECOND
from .streamed import TallyingStream

__all__ = ["arrow_available", "read_csv_columns", "read_jsonl_columns"]

_CHUNK = 1 << 24
_BOM = b"\xef\xbb\xbf"

#: Files larger than this are parsed on pyarrow's threads, in blocks of :data:`_CHUNK` bytes. Below
#: it one thread reading one block takes less CPU and, on the 2-core machine measured
#: (docs/performance.md), no more wall time.
_THREADED_BYTES = 1 << 28


#: pyarrow's blocks of a streamed source (a gzip file inflated while it is parsed): the chunks of
#: :func:`~optsched.workload.readers.read_chunks`, each handed over whole; the reader's memory is
#: reused from block to block (docs/performance.md).
_STREAM_BLOCK = READ_CHUNK


def _block(source: bytes | bytearray | TallyingStream) -> dict[str, Any]:
    """pyarrow's read options for ``source``: the threads and the block size (:data:`_THREADED_BYTES`;
    a stream in blocks of :data:`_STREAM_BLOCK` on one thread)."""
    if isinstance(source, TallyingStream):
        return {"use_threads": False, "block_size": _STREAM_BLOCK}
    threaded = len(source) > _THREADED_BYTES
    return {"use_threads": threaded, "block_size": _CHUNK if threaded else len(source) + 1}


def _input(source: bytes | bytearray | TallyingStream) -> Any:
    """What pyarrow's readers read: the bytes without a copy, or the stream."""
    import pyarrow as pa

    return source if isinstance(source, TallyingStream) else pa.py_buffer(source)


def _vouched(source: bytes | bytearray | TallyingStream, rows: int) -> bool:
    """Whether a streamed source was UTF-8 and held no ``x`` in its rows (the counts were read as
    int64 on that bet), and the source's line count is ``rows``."""
    if isinstance(source, TallyingStream):
        source.finish()
        return source.is_utf8() and not source.x_in_rows and source.line_count() == rows
    return _line_count(source) == rows


#: A date-time of the datetime formats (RE2 syntax), offsets left to pyarrow's parser.
_DATETIME = (
    r"^[ \t]*[0-9]{4}-[0-9]{2}-[0-9]{2}[ T][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,7})?"
    r"[ \t]*(Z|[+-][0-9]{2}:?[0-9]{2}|[+-][0-9]{2})?[ \t]*$"
)

#: A date-time's zone offset (pyarrow reads them into a zoned type only, and reads no other there).
_ZONE = r"(Z|[+-][0-9]{2}(:?[0-9]{2})?)[ \t]*$"

#: Largest magnitude of a numeric time the fast path passes on (beyond it the standard reader decides).
_MAX_TIME = 1e15


def arrow_available() -> bool:
    """Whether pyarrow is installed (found without importing it)."""
    from importlib.util import find_spec

    return find_spec("pyarrow") is not None


def _is_utf8(data: bytes | bytearray) -> bool:
    if data.isascii():
        return True
    decoder = codecs.getincrementaldecoder("utf-8")(errors="strict")
    view = memoryview(data)
    try:
        for start in range(0, len(data), _CHUNK):
            decoder.decode(view[start : start + _CHUNK])
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    return True


def _x_in_rows(data: bytes | bytearray) -> bool:
    """Whether an ``x`` or ``X`` follows the first line end (the header's names may hold one: ContextTokens)."""
    rows = data.find(b"\n") + 1
    return data.find(b"x", rows) >= 0 or data.find(b"X", rows) >= 0


def _line_count(data: bytes | bytearray) -> int:
    """Lines of the file, a last line without its line end included."""
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def _numpy(column: Any) -> np.ndarray:
    """A chunked column as one writable numpy array (:func:`~optsched.arrownumpy.numpy_of`)."""
    chunks = [numpy_of(chunk) for chunk in column.chunks]
    return np.concatenate(chunks) if chunks else np.zeros(0)


#: Values of 10^18 and more are refused by the grammar (at most 18 digits), with its own message.
_MAX_COUNT = 10**18 - 1


def _counts(column: Any) -> np.ndarray | None:
    """Token counts as int64: a column pyarrow read as int64 (see :func:`read_csv_columns`), or
    strings of ASCII digits (at most 18); None otherwise."""
    import pyarrow as pa

    if pa.types.is_integer(column.type):
        counts = _numpy(column)
        return None if column.null_count or (len(counts) and counts.max() > _MAX_COUNT) else counts
    import pyarrow.compute as pc

    if column.null_count or not pc.all(pc.ascii_is_decimal(column)).as_py():
        return None
    if len(column) and pc.max(pc.binary_length(column)).as_py() > 18:
        return None
    return _numpy(pc.cast(column, pa.int64()))


def _datetime_ticks(column: Any) -> np.ndarray | None:
    """Date-times of the loader's grammar as 100 ns ticks since 0001-01-01 (UTC); None otherwise."""
    chunks = [_fixed_width_ticks(chunk) for chunk in column.chunks]
    read = [c for c in chunks if c is not None]
    if len(read) == len(chunks):
        return read[0] if len(read) == 1 else np.concatenate(read) if read else np.zeros(0, np.int64)
    return _parsed_ticks(column)


#: The separators of ``YYYY-MM-DD hh:mm:ss.f`` by position (the digits are everywhere else).
_SEPARATORS = {4: b"-", 7: b"-", 10: b" T", 13: b":", 16: b":", 19: b"."}
_MONTH_DAYS = np.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])
#: Rows checked at a time (temporaries that stay in the cache).
_ROWS = 1 << 16


def _fixed_width_ticks(chunk: Any) -> np.ndarray | None:
    """The ticks of a chunk whose date-times are all ``YYYY-MM-DD hh:mm:ss[.fffffff]`` with the same
    number of fractional digits (no zone, no blanks: the Azure traces), read digit by digit from
    the string buffer with numpy, the ranges of :func:`~optsched.workload.readers.datetime_ticks`
    checked; None for anything else (the regular-expression path reads it)."""
    n = len(chunk)
    if n == 0 or chunk.null_count:
        return None
    offsets = np.frombuffer(chunk.buffers()[1], np.int32)[chunk.offset : chunk.offset + n + 1]
    width = int(offsets[1] - offsets[0])
    if width not in (19, *range(21, 28)) or int(offsets[-1] - offsets[0]) != width * n:
        return None
    text = np.frombuffer(chunk.buffers()[2], np.uint8)[offsets[0] : offsets[-1]].reshape(n, width)
    low, high = np.full(width, ord("0"), np.uint8), np.full(width, ord("9"), np.uint8)
    for position, allowed in _SEPARATORS.items():
        if position < width:
            low[position], high[position] = min(allowed), max(allowed)
    low[[11, 14, 17]], high[[11, 14, 17]] = ord("0"), np.frombuffer(b"256", np.uint8)  # tens of h, min, s
    # The date (bytes 0-9) is read once per run of rows with the same date (a trace in time order has few).
    head, tail = np.ndarray(n, "<u8", text.data, 0, (width,)), np.ndarray(n, "<u2", text.data, 8, (width,))
    first = np.flatnonzero(np.concatenate(([True], (head[1:] != head[:-1]) | (tail[1:] != tail[:-1]))))
    dates, span = text[first, :10], high - low
    for rows, at in (
        (dates, slice(0, 10)),
        *((text[k : k + _ROWS, 10:], slice(10, width)) for k in range(0, n, _ROWS)),
    ):
        if ((rows - low[at]) > span[at]).any():  # a byte outside its position's range (below it wraps around)
            return None
    if not np.isin(text[:, 10], np.frombuffer(_SEPARATORS[10], np.uint8)).all():
        return None
    if ((text[:, 11] == ord("2")) & (text[:, 12] > ord("3"))).any():  # hour 24-29
        return None
    if ((text[:, 17] == ord("6")) & (text[:, 18] != ord("0"))).any():  # second 61-69 (60: a leap second)
        return None
    days = _days(_number(dates, 0, 4), _number(dates, 5, 7), _number(dates, 8, 10))
    if days is None:
        return None
    ticks = np.repeat(days, np.diff(np.append(first, n)))  # in place from here: no 8-byte temporaries
    ticks *= 86400 * TICKS_PER_SECOND
    ticks += _clock(text, width)
    return ticks


def _number(rows: np.ndarray, start: int, stop: int) -> np.ndarray:
    """The decimal number written by the ASCII digits of columns ``start:stop`` of ``rows`` (int32)."""
    value = rows[:, start].astype(np.int32)
    for k in range(start + 1, stop):
        value *= 10
        value += rows[:, k]
    value -= ord("0") * (10 ** (stop - start) - 1) // 9  # the "0" of every digit
    return value


def _clock(text: np.ndarray, width: int) -> np.ndarray:
    """``hh:mm:ss[.f]`` (bytes 11 on, digits checked, minutes and seconds below 60 or 60 s) as 100 ns
    ticks, accumulated digit by digit in one array: the tens of minutes and of seconds in base 6."""
    clock = text[:, 11].astype(np.int64)
    zero = ord("0")
    for k, base in ((12, 10), (14, 6), (15, 10), (17, 6), (18, 10), *((j, 10) for j in range(20, width))):
        clock *= base
        clock += text[:, k]
        zero = zero * base + ord("0")
    clock -= zero
    clock *= 10 ** (27 - width) if width > 19 else TICKS_PER_SECOND
    return clock


def _days(year: np.ndarray, month: np.ndarray, day: np.ndarray) -> np.ndarray | None:
    """The dates' day numbers (int64; :func:`_ordinal`), None if one is not a date."""
    leap = (year % 4 == 0) & ((year % 100 != 0) | (year % 400 == 0))
    if not (((month >= 1) & (month <= 12)).all() and (year >= 1).all() and (day >= 1).all()):
        return None
    if (day > _MONTH_DAYS[month] + (leap & (month == 2))).any():
        return None
    return _ordinal(year, month, day).astype(np.int64)


def _ordinal(year: np.ndarray, month: np.ndarray, day: np.ndarray) -> np.ndarray:
    """Proleptic Gregorian day numbers, 0001-01-01 being day 1 (``datetime.date.toordinal``)."""
    y = year - (month <= 2)
    era = y // 400
    yoe = y - era * 400
    doy = (153 * np.where(month > 2, month - 3, month + 9) + 2) // 5 + day - 1
    days: np.ndarray = era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 305
    return days


def _parsed_ticks(column: Any) -> np.ndarray | None:
    """Date-times of the loader's grammar (zones and blanks included) through pyarrow's parser; None otherwise."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if column.null_count or not pc.all(pc.match_substring_regex(column, _DATETIME)).as_py():
        return None
    zoned = pc.sum(pc.match_substring_regex(column, _ZONE)).as_py() or 0
    if zoned not in (0, len(column)):
        return None  # some with a zone offset, some without
    try:
        stamps = pc.cast(pc.utf8_trim(column, " \t"), pa.timestamp("ns", tz="UTC" if zoned else None))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    ns = _numpy(pc.cast(stamps, pa.int64()))
    if (ns % 100).any():
        return None
    return ns // 100 + 719163 * 86400 * TICKS_PER_SECOND  # 1970-01-01 is day 719163 (0001-01-01 is day 1)


def _checked(
    fmt: TraceFormat, times: np.ndarray | None, prompts: np.ndarray, outputs: np.ndarray, keep: np.ndarray
) -> dict[str, Any] | None:
    """The kept rows as the loader's columns, or None when a value is out of range."""
    failed = 0
    if fmt.failed_if_no_output:
        no_output = keep & (outputs == 0)
        failed = int(no_output.sum())
        keep = keep & ~no_output
    if (keep & ((prompts < 1) | (outputs < 1))).any():
        return None
    index = np.flatnonzero(keep)
    if len(index) < len(keep):
        times, prompts, outputs = (None if times is None else times[index]), prompts[index], outputs[index]
    times = np.zeros(len(index)) if times is None else times
    if times.dtype.kind == "f" and not (np.abs(times) <= _MAX_TIME).all():
        return None
    return {"index": index, "times": times, "prompts": prompts, "outputs": outputs, "failed": failed}


def _model_rows(column: Any, model: str | None) -> tuple[np.ndarray, dict[str, int]]:
    """Which rows are ``model``'s (names stripped of blanks), and the row count of each other model."""
    import pyarrow.compute as pc

    models = pc.utf8_trim_whitespace(column)
    mine = pc.equal(models, model)
    others = pc.value_counts(pc.filter(models, pc.invert(mine)))
    return _numpy(mine).astype(bool), {v["values"].as_py(): v["counts"].as_py() for v in others}


def read_csv_columns(
    source: bytes | bytearray | TallyingStream, header: list[str], fmt: TraceFormat, model: str | None
) -> dict[str, Any] | None:
    """The kept rows as numpy columns (``index``, ``times``, ``prompts``, ``outputs``) with the
    ``failed`` and ``other_models`` counts, or None to let the standard-library reader decide.

    ``source`` is the file's bytes, or a :class:`~optsched.workload.streamed.TallyingStream` of its
    content: then the checks of the bytes are made on the chunks as pyarrow reads them, and an
    error met while reading (a limit, damaged gzip data) is raised as a ``WorkloadError``.
    """
    import pyarrow as pa
    import pyarrow.csv as pacsv

    use_model = model is not None and fmt.model_column is not None
    needed = [*fmt.needed, *([fmt.model_column] if use_model else [])]
    if len(set(header)) != len(header) or any(c not in header for c in needed):
        return None
    if not isinstance(source, TallyingStream) and not _is_utf8(source):
        return None
    types = {c: pa.string() for c in needed}
    if isinstance(source, TallyingStream) or not _x_in_rows(source):
        # pyarrow's integers are the grammar's (ASCII digits, blanks around, a minus sign) but for
        # hexadecimal (0x64): without an x in the rows they are read as int64, with no string kept.
        types[fmt.prompt] = types[fmt.output] = pa.int64()
    if fmt.arrival is not None and fmt.time_unit != "datetime":
        types[fmt.arrival] = pa.float64()
    try:
        table = pacsv.read_csv(
            _input(source),
            read_options=pacsv.ReadOptions(column_names=header, skip_rows=1, **_block(source)),
            parse_options=pacsv.ParseOptions(newlines_in_values=False),
            convert_options=pacsv.ConvertOptions(
                include_columns=needed, column_types=types, strings_can_be_null=False, quoted_strings_can_be_null=False
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        table = None
    if not _vouched(source, -1 if table is None else table.num_rows + 1) or table is None:
        return None  # a blank line, a quoted line end or not UTF-8: the standard reader names it
    if any(table.column(c).null_count for c in needed):
        return None  # a missing value
    prompts, outputs = _counts(table.column(fmt.prompt)), _counts(table.column(fmt.output))
    times = None
    if fmt.arrival is not None:
        column = table.column(fmt.arrival)
        times = _datetime_ticks(column) if fmt.time_unit == "datetime" else _numpy(column)
    if prompts is None or outputs is None or (fmt.arrival is not None and times is None):
        return None
    keep = np.ones(table.num_rows, dtype=bool)
    other_models: dict[str, int] = {}
    if use_model:
        keep, other_models = _model_rows(table.column(fmt.model_column), model)
    del table
    columns = _checked(fmt, times, prompts, outputs, keep)
    pa.default_memory_pool().release_unused()
    return None if columns is None else {**columns, "other_models": other_models}


def read_jsonl_columns(source: bytes | bytearray | TallyingStream, fmt: TraceFormat) -> dict[str, Any] | None:
    """A JSON Lines trace's rows as numpy columns (as :func:`read_csv_columns`), or None."""
    import pyarrow as pa
    import pyarrow.json as pajson

    if not isinstance(source, TallyingStream) and (not _is_utf8(source) or source.startswith(_BOM)):
        return None
    fields = [pa.field(fmt.prompt, pa.int64()), pa.field(fmt.output, pa.int64())]
    if fmt.arrival is not None:
        fields.append(pa.field(fmt.arrival, pa.float64()))
    try:
        table = pajson.read_json(
            _input(source),
            read_options=pajson.ReadOptions(**_block(source)),
            parse_options=pajson.ParseOptions(
                explicit_schema=pa.schema(fields), unexpected_field_behavior="ignore", newlines_in_values=False
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        table = None
    if not _vouched(source, -1 if table is None else table.num_rows) or table is None:
        return None
    if (isinstance(source, TallyingStream) and source.start == _BOM) or any(
        table.column(f.name).null_count for f in fields
    ):
        return None
    times = _numpy(table.column(fmt.arrival)) if fmt.arrival is not None else None
    prompts, outputs = _numpy(table.column(fmt.prompt)), _numpy(table.column(fmt.output))
    columns = _checked(fmt, times, prompts, outputs, np.ones(table.num_rows, dtype=bool))
    return None if columns is None else {**columns, "other_models": {}}
