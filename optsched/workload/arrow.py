"""The fast path of the CSV loader: pyarrow parses the columns, numpy checks them.

Used (pyarrow importing) for formats whose time is a number (seconds, milliseconds or
none) and a whole file is read. It returns exactly the rows of the standard-library reader (the
tests compare both on every format), or None whenever anything is off (a parse or conversion
error, a value out of range): the standard-library reader then reads the file and names the line
and the column of the problem. The file must be UTF-8, like everywhere else: it is checked first.
"""

from __future__ import annotations

import codecs
from typing import Any

import numpy as np

from .formats import TraceFormat
from .readers import open_binary, utf8_error

__all__ = ["arrow_available", "read_csv_columns"]

_CHUNK = 1 << 24


def arrow_available() -> bool:
    """Whether pyarrow can be imported."""
    try:
        import pyarrow.csv  # noqa: F401
    except ImportError:
        return False
    return True


def _check_utf8(path: str) -> None:
    """The whole file must be UTF-8 (pyarrow checks only the string columns it converts)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="strict")
    try:
        with open_binary(path) as fh:
            for chunk in iter(lambda: fh.read(_CHUNK), b""):
                decoder.decode(chunk)
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        raise utf8_error(path) from None


def read_csv_columns(path: str, header: list[str], fmt: TraceFormat, model: str | None) -> dict[str, Any] | None:
    """The kept rows as numpy columns (``index``, ``times``, ``prompts``, ``outputs``) with the
    ``failed`` and ``other_models`` counts, or None to let the standard-library reader decide."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pacsv

    _check_utf8(path)
    use_model = model is not None and fmt.model_column is not None
    needed = [*fmt.needed, *([fmt.model_column] if use_model else [])]
    if len(set(header)) != len(header) or any(c not in header for c in needed):
        return None
    types = {fmt.prompt: pa.int64(), fmt.output: pa.int64()}
    if fmt.arrival is not None:
        types[fmt.arrival] = pa.float64()
    if use_model:
        types[fmt.model_column] = pa.string()  # type: ignore[index]
    try:
        with open_binary(path) as fh:
            table = pacsv.read_csv(
                fh,
                read_options=pacsv.ReadOptions(column_names=header, skip_rows=1, block_size=_CHUNK),
                convert_options=pacsv.ConvertOptions(
                    include_columns=needed,
                    column_types=types,
                    strings_can_be_null=False,
                    quoted_strings_can_be_null=False,
                ),
            )
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None
    if any(table.column(c).null_count for c in needed):
        return None
    keep = np.ones(table.num_rows, dtype=bool)
    other_models: dict[str, int] = {}
    if use_model:
        models = pc.utf8_trim_whitespace(table.column(fmt.model_column))
        mine = pc.equal(models, model).to_numpy(zero_copy_only=False)
        others = pc.value_counts(pc.filter(models, pc.invert(pc.equal(models, model))))
        other_models = {v["values"].as_py(): v["counts"].as_py() for v in others}
        keep &= mine
    prompts = table.column(fmt.prompt).to_numpy()
    outputs = table.column(fmt.output).to_numpy()
    failed = 0
    if fmt.failed_if_no_output:
        no_output = keep & (outputs == 0)
        failed = int(no_output.sum())
        keep &= ~no_output
    if (prompts[keep] < 1).any() or (outputs[keep] < 1).any():
        return None
    index = np.flatnonzero(keep)
    times = np.zeros(len(index))
    if fmt.arrival is not None:
        times = table.column(fmt.arrival).to_numpy()[index]
    columns = {
        "index": index,
        "times": times,
        "prompts": prompts[index],
        "outputs": outputs[index],
        "failed": failed,
        "other_models": other_models,
    }  # copies: the table can go
    del table, prompts, outputs
    pa.default_memory_pool().release_unused()
    return columns if np.isfinite(times).all() else None
