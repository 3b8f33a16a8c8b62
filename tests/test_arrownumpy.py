"""``optsched.arrownumpy.numpy_of``: pyarrow arrays as numpy arrays, equal to ``to_pylist``."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from optsched.arrownumpy import numpy_of

TYPES = (pa.int8(), pa.int32(), pa.int64(), pa.uint16(), pa.float32(), pa.float64(), pa.bool_(), pa.string())


def _values(arrow_type: pa.DataType, rng: random.Random, n: int) -> list:
    if pa.types.is_boolean(arrow_type):
        return [rng.random() < 0.5 for _ in range(n)]
    if pa.types.is_string(arrow_type):
        return [f"r{rng.randint(0, 9)}" for _ in range(n)]
    if pa.types.is_floating(arrow_type):
        return [rng.choice([0.5, -2.25, 1e30, 3.0]) for _ in range(n)]
    return [rng.randint(0, 100) for _ in range(n)]


@pytest.mark.parametrize("arrow_type", TYPES, ids=str)
@pytest.mark.parametrize("seed", range(4))
def test_numpy_of_equals_the_python_values(arrow_type: pa.DataType, seed: int) -> None:
    rng = random.Random(seed)
    chunks = []
    for _ in range(rng.randint(0, 3)):
        values = _values(arrow_type, rng, rng.randint(0, 40))
        nulls = seed % 2 == 1 and not pa.types.is_string(arrow_type)
        values = [None if nulls and rng.random() < 0.2 else v for v in values]
        array = pa.array(values, arrow_type)
        lo = rng.randint(0, len(array))
        chunks.append(array.slice(lo, rng.randint(0, len(array) - lo)))  # an offset into the buffers
    column = pa.chunked_array(chunks, arrow_type)
    expected = column.to_pylist()
    if None in expected:
        fill = True if pa.types.is_boolean(arrow_type) else 7
        got = numpy_of(column, fill)
        expected = [fill if v is None else v for v in expected]
    else:
        got = numpy_of(column)
    assert len(got) == len(expected)
    assert got.tolist() == expected


def test_numpy_of_a_plain_array_and_an_empty_column() -> None:
    assert numpy_of(pa.array([1, 2, 3], pa.int64())).tolist() == [1, 2, 3]
    assert numpy_of(pa.array([True, None, False]), False).tolist() == [True, False, False]
    assert numpy_of(pa.chunked_array([], pa.int64())).dtype == np.int64
