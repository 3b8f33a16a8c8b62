"""Python values as pyarrow arrays without importing pandas.

pyarrow's ``pa.array``, ``Table.from_pylist`` and ``Table.from_pydict`` import pandas when it is
installed (they test whether their input is a pandas object): about a third of a second, paid by
the first row a sweep stores. :func:`arrow_array` builds the array from its buffers instead
(``pa.Array.from_buffers``): validity bitmap, values or offsets and bytes, the same array
``pa.array(values, type)`` gives (``tests/sweep/test_sweep_speed.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["KINDS", "arrow_array"]

#: The column kinds :func:`arrow_array` builds, with their numpy dtype (strings: UTF-8 bytes).
KINDS: dict[str, Any] = {"int64": np.int64, "float64": np.float64, "bool": np.bool_, "string": None}


def _bitmap(flags: np.ndarray) -> Any:
    import pyarrow as pa

    return pa.py_buffer(np.packbits(flags, bitorder="little"))


def arrow_array(values: Sequence[Any], kind: str) -> Any:
    """``values`` (None for a null) as a pyarrow array of ``kind`` (a key of :data:`KINDS`).

    Raises
    ------
    TypeError
        A value that is not of the kind (a string in a number column, a number in a string
        column, a float in an integer column).
    """
    import pyarrow as pa

    n = len(values)
    valid = np.fromiter((v is not None for v in values), np.bool_, n)
    nulls = n - int(valid.sum())
    validity = _bitmap(valid) if nulls else None
    present = [v for v in values if v is not None]
    if kind == "string":
        if not all(isinstance(v, str) for v in present):
            raise TypeError(f"a string column holds {_kinds_of(present, str)}")
        encoded = [b"" if v is None else v.encode() for v in values]
        offsets = np.zeros(n + 1, np.int32)
        np.cumsum([len(b) for b in encoded], out=offsets[1:])
        buffers = [validity, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))]
        return pa.Array.from_buffers(pa.string(), n, buffers, null_count=nulls)
    if kind == "bool":
        if not all(isinstance(v, (bool, np.bool_)) for v in present):
            raise TypeError(f"a bool column holds {_kinds_of(present, (bool, np.bool_))}")
        data = np.fromiter((bool(v) for v in values), np.bool_, n)
        return pa.Array.from_buffers(pa.bool_(), n, [validity, _bitmap(data)], null_count=nulls)
    number = (int, np.integer) if kind == "int64" else (int, float, np.integer, np.floating)
    if not all(isinstance(v, number) and not isinstance(v, (bool, np.bool_)) for v in present):
        raise TypeError(f"an {kind} column holds {_kinds_of(present, number)}")
    data = np.fromiter((0 if v is None else v for v in values), KINDS[kind], n)
    arrow_type = pa.int64() if kind == "int64" else pa.float64()
    return pa.Array.from_buffers(arrow_type, n, [validity, pa.py_buffer(data)], null_count=nulls)


def _kinds_of(values: list[Any], allowed: Any) -> str:
    """The type names of the values that are not ``allowed`` (for an error message)."""
    return ", ".join(sorted({type(v).__name__ for v in values if not isinstance(v, allowed)})) or "bool"
