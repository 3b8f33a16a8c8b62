"""pyarrow arrays as numpy arrays without importing pandas.

pyarrow's ``Array.to_numpy`` and ``np.asarray(array)`` import pandas when it is installed (about
half a second of a short command such as ``optsched check``). :func:`numpy_of` reads the data buffer
of a fixed-width column without nulls directly (booleans unpacked from their bits); every other
column goes through ``to_numpy``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["numpy_of"]

#: numpy's kind letter per pyarrow type family (fixed-width numbers).
_KINDS = (("is_signed_integer", "i"), ("is_unsigned_integer", "u"), ("is_floating", "f"))


def numpy_of(column: Any, null: Any = None) -> np.ndarray:
    """A pyarrow ``Array`` or ``ChunkedArray`` as one numpy array (read-only where it is a view of
    one chunk's buffer): fixed-width numbers and booleans from their buffers, ``null`` in place of
    each null when given; others by ``to_numpy(zero_copy_only=False)``."""
    chunks = column.chunks if hasattr(column, "chunks") else [column]
    parts = [_chunk(chunk, null) for chunk in chunks]
    if len(parts) == 1:
        return parts[0]
    if parts:
        return np.concatenate(parts)
    return np.zeros(0, _dtype(column.type) or object)


def _dtype(arrow_type: Any) -> np.dtype | None:
    """The numpy dtype of a fixed-width numeric or boolean arrow type; None for any other."""
    import pyarrow as pa

    if pa.types.is_boolean(arrow_type):
        return np.dtype(bool)
    for test, kind in _KINDS:
        if getattr(pa.types, test)(arrow_type) and arrow_type.bit_width in (8, 16, 32, 64):
            return np.dtype(f"{kind}{arrow_type.bit_width // 8}")
    return None


def _bits(buffer: Any, offset: int, n: int) -> np.ndarray:
    """``n`` bits of an arrow bitmap from bit ``offset``, as booleans."""
    if buffer is None or not n:
        return np.zeros(n, bool)
    return np.unpackbits(np.frombuffer(buffer, np.uint8), count=offset + n, bitorder="little")[offset:].astype(bool)


def _chunk(array: Any, null: Any) -> np.ndarray:
    dtype = _dtype(array.type)
    if dtype is None or (array.null_count and null is None):
        return array.to_numpy(zero_copy_only=False)
    validity, data = array.buffers()[:2]
    n, offset = len(array), array.offset
    if dtype.kind == "b":
        values = _bits(data, offset, n)
    elif data is None or not n:
        values = np.zeros(n, dtype)
    else:
        values = np.frombuffer(data, dtype, count=n, offset=offset * dtype.itemsize)
    if array.null_count:
        values = values.copy()
        values[~_bits(validity, offset, n)] = null
    return values
