"""The fast path of the trace loaders: pyarrow parses the columns, numpy checks them.

:func:`read_csv_columns` reads a CSV trace, :func:`read_jsonl_columns` a JSON Lines one, from the
file's bytes (read once, within the limits of :func:`~optsched.workload.readers.read_bytes`). Each
returns exactly the rows of the standard-library reader (the tests compare both on every format),
or None whenever anything is off: a parse or conversion error, a value outside the grammar of
:mod:`optsched.integers` (counts are ASCII digits: pyarrow alone would read ``0x64`` as 100), a
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
from .readers import TICKS_PER_SECOND

__all__ = ["arrow_available", "read_csv_columns", "read_jsonl_columns"]

_CHUNK = 1 << 24

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
    """Whether pyarrow can be imported."""
    try:
        import pyarrow.csv  # noqa: F401
        import pyarrow.json  # noqa: F401
    except ImportError:
        return False
    return True


def _is_utf8(data: bytes | bytearray) -> bool:
    decoder = codecs.getincrementaldecoder("utf-8")(errors="strict")
    view = memoryview(data)
    try:
        for start in range(0, len(data), _CHUNK):
            decoder.decode(view[start : start + _CHUNK])
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    return True


def _line_count(data: bytes | bytearray) -> int:
    """Lines of the file, a last line without its line end included."""
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def _numpy(column: Any) -> np.ndarray:
    """A chunked column as one writable numpy array (:func:`~optsched.arrownumpy.numpy_of`)."""
    chunks = [numpy_of(chunk) for chunk in column.chunks]
    return np.concatenate(chunks) if chunks else np.zeros(0)


def _counts(column: Any) -> np.ndarray | None:
    """Token counts written as ASCII digits (at most 18), as int64; None otherwise."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if column.null_count or not pc.all(pc.ascii_is_decimal(column)).as_py():
        return None
    if len(column) and pc.max(pc.binary_length(column)).as_py() > 18:
        return None
    return _numpy(pc.cast(column, pa.int64()))


def _datetime_ticks(column: Any) -> np.ndarray | None:
    """Date-times of the loader's grammar as 100 ns ticks since 0001-01-01 (UTC); None otherwise."""
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
    if (prompts[keep] < 1).any() or (outputs[keep] < 1).any():
        return None
    index = np.flatnonzero(keep)
    kept_times = np.zeros(len(index)) if times is None else times[index]
    if times is not None and times.dtype.kind == "f" and not (np.abs(kept_times) <= _MAX_TIME).all():
        return None
    return {"index": index, "times": kept_times, "prompts": prompts[index], "outputs": outputs[index], "failed": failed}


def read_csv_columns(
    data: bytes | bytearray, header: list[str], fmt: TraceFormat, model: str | None
) -> dict[str, Any] | None:
    """The kept rows as numpy columns (``index``, ``times``, ``prompts``, ``outputs``) with the
    ``failed`` and ``other_models`` counts, or None to let the standard-library reader decide."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pacsv

    use_model = model is not None and fmt.model_column is not None
    needed = [*fmt.needed, *([fmt.model_column] if use_model else [])]
    if len(set(header)) != len(header) or any(c not in header for c in needed) or not _is_utf8(data):
        return None
    types = {c: pa.string() for c in needed}
    if fmt.arrival is not None and fmt.time_unit != "datetime":
        types[fmt.arrival] = pa.float64()
    try:
        table = pacsv.read_csv(
            pa.py_buffer(data),
            read_options=pacsv.ReadOptions(column_names=header, skip_rows=1, block_size=_CHUNK),
            parse_options=pacsv.ParseOptions(newlines_in_values=False),
            convert_options=pacsv.ConvertOptions(
                include_columns=needed, column_types=types, strings_can_be_null=False, quoted_strings_can_be_null=False
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None
    if table.num_rows + 1 != _line_count(data) or any(table.column(c).null_count for c in needed):
        return None  # a blank line, a quoted line end or a missing value: the standard reader names it
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
        models = pc.utf8_trim_whitespace(table.column(fmt.model_column))
        mine = pc.equal(models, model)
        others = pc.value_counts(pc.filter(models, pc.invert(mine)))
        other_models = {v["values"].as_py(): v["counts"].as_py() for v in others}
        keep &= _numpy(mine).astype(bool)
    del table
    columns = _checked(fmt, times, prompts, outputs, keep)
    pa.default_memory_pool().release_unused()
    return None if columns is None else {**columns, "other_models": other_models}


def read_jsonl_columns(data: bytes | bytearray, fmt: TraceFormat) -> dict[str, Any] | None:
    """A JSON Lines trace's rows as numpy columns (as :func:`read_csv_columns`), or None."""
    import pyarrow as pa
    import pyarrow.json as pajson

    if not _is_utf8(data) or data.startswith(b"\xef\xbb\xbf"):
        return None
    fields = [pa.field(fmt.prompt, pa.int64()), pa.field(fmt.output, pa.int64())]
    if fmt.arrival is not None:
        fields.append(pa.field(fmt.arrival, pa.float64()))
    try:
        table = pajson.read_json(
            pa.py_buffer(data),
            read_options=pajson.ReadOptions(block_size=_CHUNK),
            parse_options=pajson.ParseOptions(
                explicit_schema=pa.schema(fields), unexpected_field_behavior="ignore", newlines_in_values=False
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return None
    if table.num_rows != _line_count(data) or any(table.column(f.name).null_count for f in fields):
        return None
    times = _numpy(table.column(fmt.arrival)) if fmt.arrival is not None else None
    prompts, outputs = _numpy(table.column(fmt.prompt)), _numpy(table.column(fmt.output))
    columns = _checked(fmt, times, prompts, outputs, np.ones(table.num_rows, dtype=bool))
    return None if columns is None else {**columns, "other_models": {}}
