"""Per-request results of a replay as a table: CSV, or Parquet (with pyarrow), by the file's extension.

One row per request, in instance order, with the columns of :data:`COLUMNS` (times in seconds,
absolute for ``first_scheduled``, ``first_token`` and ``finish``). An undefined value (TPOT of a
one-token request, the times of a request never served) is empty in CSV and null in Parquet.
Floats are written with ``repr`` (shortest exact round trip), so the percentiles recomputed from
the file equal those of the metrics.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from .jsonio import atomic_output, write_text_atomic
from .schedule import ReplayResult

__all__ = ["COLUMNS", "TABLE_EXTENSIONS", "TableError", "check_table_path", "request_rows", "write_request_table"]

#: Column name and Parquet type of each column, in order.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("id", "string"),
    ("arrival", "float64"),
    ("prompt_tokens", "int64"),
    ("output_tokens", "int64"),
    ("first_scheduled", "float64"),
    ("first_token", "float64"),
    ("finish", "float64"),
    ("ttft", "float64"),
    ("tpot", "float64"),
    ("latency", "float64"),
    ("queue", "float64"),
    ("evictions", "int64"),
    ("slo_met", "bool"),
)
TABLE_EXTENSIONS = (".csv", ".parquet")


class TableError(ValueError):
    """The output file cannot be written in the format its extension names."""


def check_table_path(path: str) -> None:
    """Raise :class:`TableError` unless ``path`` ends in ``.csv`` or ``.parquet`` (and, for Parquet,
    pyarrow is installed): checked before any long computation."""
    suffix = Path(path).suffix.lower()
    if suffix not in TABLE_EXTENSIONS:
        raise TableError(f"{path}: unknown table format {suffix or '(no extension)'!r}; use .csv or .parquet")
    if suffix == ".parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise TableError(f"{path}: Parquet needs pyarrow: pip install 'optsched[parquet]'") from None


def request_rows(result: ReplayResult) -> list[dict[str, Any]]:
    """One dict per request (instance order) with the :data:`COLUMNS`."""
    rows = []
    for rid, o in result.outcomes.items():
        r = o.request
        rows.append({
            "id": rid,
            "arrival": r.arrival,
            "prompt_tokens": r.prompt_tokens,
            "output_tokens": r.output_tokens,
            "first_scheduled": o.first_scheduled,
            "first_token": o.first_token,
            "finish": o.finish,
            "ttft": o.ttft,
            "tpot": o.tpot,
            "latency": o.latency,
            "queue": o.queue,
            "evictions": o.evictions,
            "slo_met": o.meets_slo,
        })
    return rows


def _csv_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def write_request_table(path: str | Path, result: ReplayResult) -> None:
    """Write the per-request table atomically; the extension picks CSV or Parquet."""
    path = str(path)
    check_table_path(path)
    rows = request_rows(result)
    names = [name for name, _ in COLUMNS]
    if path.lower().endswith(".csv"):
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(names)
        writer.writerows([_csv_cell(row[n]) for n in names] for row in rows)
        write_text_atomic(path, buf.getvalue())
        return
    import pyarrow as pa
    import pyarrow.parquet as pq

    types = {"string": pa.string(), "float64": pa.float64(), "int64": pa.int64(), "bool": pa.bool_()}
    schema = pa.schema([(name, types[kind]) for name, kind in COLUMNS])
    table = pa.table({n: [row[n] for row in rows] for n in names}, schema=schema)
    with atomic_output(path) as tmp:
        pq.write_table(table, tmp)
