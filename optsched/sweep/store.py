"""The sweep's result store: a Parquet dataset, one file per finished cell.

``DIR/part-<key>.parquet`` holds the rows of the cell (or capacity search) whose content hash is
``<key>``, all with the one schema of :data:`optsched.sweep.cells.COLUMNS`. A file is written to
a hidden temporary name and hard-linked to its final name only when complete, and the link fails
when the name exists: a row is never written twice, a crash never leaves half a file, and
``--resume`` skips exactly the keys that have a file. ``DIR/_sweep.json`` records the spec (files
whose names start with ``_`` or ``.`` are not part of the dataset for pyarrow and pandas; duckdb
reads ``DIR/part-*.parquet``).

pyarrow is a dependency of optsched; :func:`require_pyarrow` turns its absence (an install that
skipped dependencies) into a one-line message.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .cells import COLUMNS

__all__ = ["MissingDependency", "SweepStore", "require_pyarrow"]

PREFIX, SUFFIX = "part-", ".parquet"


class MissingDependency(RuntimeError):
    """An optional package the asked-for feature needs is not installed."""


def require_pyarrow() -> Any:
    """The pyarrow module, or :class:`MissingDependency` saying how to install it."""
    try:
        import pyarrow
        import pyarrow.parquet  # noqa: F401 - the Parquet writer
    except ImportError:
        raise MissingDependency(
            "optsched sweep stores its rows as Parquet and needs pyarrow, a dependency "
            "of optsched that is missing here: pip install pyarrow"
        ) from None
    return pyarrow


def arrow_schema() -> Any:
    """The Arrow schema of a row."""
    pa = require_pyarrow()
    types = {"string": pa.string(), "int64": pa.int64(), "float64": pa.float64(), "bool": pa.bool_()}
    return pa.schema([(name, types[kind]) for name, kind in COLUMNS.items()])


class SweepStore:
    """The folder of a sweep's results (see the module docstring)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self._schema = arrow_schema()

    def path_of(self, key: str) -> Path:
        return self.root / f"{PREFIX}{key}{SUFFIX}"

    def done_keys(self) -> set[str]:
        """Keys of the cells whose rows are in the store."""
        if not self.root.is_dir():
            return set()
        return {p.name[len(PREFIX) : -len(SUFFIX)] for p in self.root.glob(f"{PREFIX}*{SUFFIX}")}

    def write(self, key: str, rows: Iterable[dict[str, Any]]) -> bool:
        """Write one cell's rows; False (and nothing written) when the key is already stored."""
        import pyarrow.parquet as pq

        final = self.path_of(key)
        if final.exists():
            return False
        table = self._table(list(rows))
        tmp = self.root / f".tmp-{key}-{os.getpid()}{SUFFIX}"
        pq.write_table(table, tmp)
        try:
            os.link(tmp, final)  # fails when the name exists: never two files for one key
        except FileExistsError:
            return False
        finally:
            tmp.unlink(missing_ok=True)
        return True

    def _table(self, rows: list[dict[str, Any]]) -> Any:
        pa = require_pyarrow()
        unknown = {k for r in rows for k in r} - set(COLUMNS)
        if unknown:
            raise ValueError(f"row columns outside the schema: {sorted(unknown)}")
        return pa.Table.from_pylist([{k: r.get(k) for k in COLUMNS} for r in rows], schema=self._schema)

    def read(self) -> Any:
        """Every stored row as one pyarrow Table (empty with the schema when none)."""
        import pyarrow.parquet as pq

        pa = require_pyarrow()
        files = sorted(self.root.glob(f"{PREFIX}*{SUFFIX}")) if self.root.is_dir() else []
        if not files:
            return self._schema.empty_table()
        return pa.concat_tables([pq.read_table(f, schema=self._schema) for f in files])

    def rows_of(self, key: str) -> list[dict[str, Any]]:
        """The stored rows of one key."""
        import pyarrow.parquet as pq

        return pq.read_table(self.path_of(key), schema=self._schema).to_pylist()

    def write_meta(self, meta: dict[str, Any]) -> None:
        """``_sweep.json``: the spec and how the sweep was run (replaced atomically)."""
        from ..jsonio import write_text_atomic

        write_text_atomic(self.root / "_sweep.json", json.dumps(meta, indent=1, sort_keys=True, default=str) + "\n")

    def read_meta(self) -> dict[str, Any] | None:
        path = self.root / "_sweep.json"
        return json.loads(path.read_text()) if path.is_file() else None
