"""The sweep's result store: a Parquet dataset, one file per finished cell.

``DIR/part-<key>.parquet`` holds the rows of the cell (or capacity search) whose content hash is
``<key>``, all with the one schema of :data:`optsched.sweep.cells.COLUMNS` (a file without the
:data:`~optsched.sweep.cells.OPTIONAL_COLUMNS` reads them as null). A file is written to
a temporary file created exclusively in DIR (``tempfile.mkstemp``: a new file, never a link that
is followed) and hard-linked to its final name only when complete; the link fails when the name
exists, a symbolic link included: a row is never written twice, a crash never leaves half a file
(Ctrl-C and SIGTERM wait for the write to end, so an interrupted sweep leaves no temporary file),
and ``--resume`` skips exactly the keys that have a file. ``DIR/_sweep.json`` records the spec
(files whose names start with ``_`` or ``.`` are not part of the dataset for pyarrow and pandas;
duckdb reads ``DIR/part-*.parquet``).

A sweep writes its folder only inside :meth:`SweepStore.claim`: it holds an exclusive lock on
the folder (``flock`` on the folder itself, so a second sweep into it is refused at once, and
the lock ends with the process, however it ends) and refuses a folder that holds files that are
not a sweep's, or another spec's sweep unless asked to resume (add to) it. A damaged folder (a
part file that is not a regular file, not Parquet, or of another schema; a ``_sweep.json`` that is
not a JSON object) is a :class:`StoreError` naming the file.

pyarrow is a dependency of optsched; :func:`require_pyarrow` turns its absence (an install that
skipped dependencies) into a one-line message.
"""

from __future__ import annotations

import fcntl
import json
import os
import stat
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..arrowbuild import arrow_array
from ..interrupt import held_signals
from .cells import COLUMNS, OPTIONAL_COLUMNS

__all__ = ["META", "MissingDependency", "StoreError", "SweepStore", "is_store_name", "require_pyarrow"]

PREFIX, SUFFIX = "part-", ".parquet"

#: The file that records a sweep's spec and mode.
META = "_sweep.json"

#: Prefix of the temporary files of a part file being written.
TMP_PREFIX = ".tmp-"


class MissingDependency(RuntimeError):
    """An optional package the asked-for feature needs is not installed."""


class StoreError(ValueError):
    """A sweep folder that cannot be read or written as asked; the message names the file."""


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


def is_store_name(name: str) -> bool:
    """Whether a file name inside a sweep folder is one of the sweep's own files (its spec record,
    a part file, or the temporary file of either)."""
    return name == META or _is_temporary(name) or (name.startswith(PREFIX) and name.endswith(SUFFIX))


def _is_temporary(name: str) -> bool:
    return name.startswith((TMP_PREFIX, f".{META}."))


def _comparable(meta: dict[str, Any]) -> Any:
    """``meta`` as it reads back from ``_sweep.json``, less the spec file's name (a sweep resumed
    from a moved or renamed spec file is the same sweep)."""
    return json.loads(json.dumps({k: v for k, v in meta.items() if k != "spec_file"}, sort_keys=True, default=str))


class SweepStore:
    """The folder of a sweep's results (see the module docstring)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self._schema = arrow_schema()
        # a part file without the optional columns reads them as null
        self._older = self._schema.remove_metadata()
        for name in OPTIONAL_COLUMNS:
            self._older = self._older.remove(self._older.get_field_index(name))

    def path_of(self, key: str) -> Path:
        return self.root / f"{PREFIX}{key}{SUFFIX}"

    def _parts(self) -> list[Path]:
        """The part files, each checked to be a regular file (not a link, folder or device)."""
        if not self.root.is_dir():
            return []
        files = sorted(self.root.glob(f"{PREFIX}*{SUFFIX}"))
        for path in files:
            if not stat.S_ISREG(os.lstat(path).st_mode):
                raise StoreError(f"{path}: not a regular file (a symbolic link, folder or device) in the sweep folder")
        return files

    def done_keys(self) -> set[str]:
        """Keys of the cells whose rows are in the store."""
        return {p.name[len(PREFIX) : -len(SUFFIX)] for p in self._parts()}

    def write(self, key: str, rows: Iterable[dict[str, Any]]) -> bool:
        """Write one cell's rows; False (and nothing written) when the key is already stored."""
        import pyarrow.parquet as pq

        from ..jsonio import default_file_mode

        final = self.path_of(key)
        if os.path.lexists(final):
            return False
        table = self._table(list(rows))
        with held_signals():  # Ctrl-C or SIGTERM waits for the file (whole or none), then interrupts
            fd, tmp = tempfile.mkstemp(prefix=f"{TMP_PREFIX}{key}-", suffix=SUFFIX, dir=self.root)
            try:
                with os.fdopen(fd, "wb") as fh:
                    os.fchmod(fh.fileno(), default_file_mode())
                    pq.write_table(table, fh)
                os.link(tmp, final)  # fails when the name exists (a link too): never two files for one key
            except FileExistsError:
                return False
            finally:
                os.unlink(tmp)
        return True

    def _table(self, rows: list[dict[str, Any]]) -> Any:
        pa = require_pyarrow()
        unknown = {k for r in rows for k in r} - set(COLUMNS)
        if unknown:
            raise ValueError(f"row columns outside the schema: {sorted(unknown)}")
        # column by column from buffers: pa.Table.from_pylist imports pandas (see optsched.arrowbuild)
        columns = [arrow_array([r.get(name) for r in rows], kind) for name, kind in COLUMNS.items()]
        return pa.Table.from_arrays(columns, schema=self._schema)

    def _read_part(self, path: Path) -> Any:
        """One part file's table; :class:`StoreError` naming it when it is not a part file."""
        import pyarrow.parquet as pq

        return self._checked(path, lambda: pq.read_table(path, schema=self._schema))

    def _checked(self, path: Path, read: Any = None) -> Any:
        """``read()`` once ``path`` is known to be a regular Parquet file of the row schema (its
        footer read); :class:`StoreError` naming it otherwise."""
        import pyarrow.parquet as pq

        pa = require_pyarrow()
        if not stat.S_ISREG(os.lstat(path).st_mode):
            raise StoreError(f"{path}: not a regular file (a symbolic link, folder or device) in the sweep folder")
        try:
            found = pq.read_schema(path).remove_metadata()
            if not (found.equals(self._schema) or found.equals(self._older)):
                raise StoreError(f"{path}: a Parquet file of another schema, not a part file of an optsched sweep")
            return None if read is None else read()
        except (pa.ArrowException, OSError, ValueError, TypeError) as exc:
            if isinstance(exc, StoreError):
                raise
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise StoreError(f"{path}: not a readable part file of an optsched sweep ({reason})") from None

    def read(self) -> Any:
        """Every stored row as one pyarrow Table (empty with the schema when none)."""
        pa = require_pyarrow()
        files = self._parts()
        if not files:
            return self._schema.empty_table()
        return pa.concat_tables([self._read_part(f) for f in files])

    def rows_of(self, key: str) -> list[dict[str, Any]]:
        """The stored rows of one key."""
        return self._read_part(self.path_of(key)).to_pylist()

    def write_meta(self, meta: dict[str, Any]) -> None:
        """``_sweep.json``: the spec and how the sweep was run, written to a temporary file created
        exclusively and renamed over the name (a link there is replaced, never written through)."""
        from ..jsonio import default_file_mode, finite_json

        with held_signals():  # Ctrl-C or SIGTERM waits for the file, then interrupts
            fd, tmp = tempfile.mkstemp(prefix=f".{META}.", suffix=".tmp", dir=self.root)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    os.fchmod(fh.fileno(), default_file_mode())
                    fh.write(json.dumps(finite_json(meta), indent=1, sort_keys=True, default=str) + "\n")
                os.replace(tmp, self.root / META)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise

    def read_meta(self) -> dict[str, Any] | None:
        """The content of ``_sweep.json`` (None when there is none); :class:`StoreError` naming it
        when it is not a regular file holding a JSON object with the sweep's ``spec``."""
        from ..jsonio import read_json

        path = self.root / META
        if not os.path.lexists(path):
            return None
        if not stat.S_ISREG(os.lstat(path).st_mode):
            raise StoreError(f"{path}: not a regular file (a symbolic link, folder or device) in the sweep folder")
        meta = read_json(path, StoreError)
        if not isinstance(meta, dict) or not isinstance(meta.get("spec"), dict):
            raise StoreError(f"{path}: not the record of an optsched sweep (a JSON object with its 'spec')")
        return meta

    def open_folder(self) -> int:
        """Create the folder if needed (its parent must exist) and open it: a descriptor of the
        folder; :class:`StoreError` naming it when it cannot be."""
        try:
            self.root.mkdir(exist_ok=True)
            return os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        except FileExistsError:
            raise StoreError(f"{self.root}: exists and is not a folder (a dangling symbolic link?)") from None
        except OSError as exc:
            raise StoreError(f"{self.root}: cannot create or open the folder ({exc.strerror})") from None

    @contextmanager
    def claim(self, meta: dict[str, Any], resume: bool) -> Iterator[None]:
        """Create the folder if needed, lock it for this process and record ``meta`` in it; the
        block writes the cells (see the module docstring).

        Raises
        ------
        StoreError
            When another sweep holds the lock, the folder holds files that are not a sweep's, or
            ``resume`` is false and it holds another spec's sweep or stored cells.
        """
        fd = self.open_folder()
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise StoreError(
                    f"{self.root}: another optsched sweep is writing this folder; wait for it or choose another --out"
                ) from None
            self._check_owner(meta, resume)
            for name in os.listdir(self.root):  # left by a killed sweep; nobody else writes here
                if _is_temporary(name):
                    (self.root / name).unlink(missing_ok=True)
            self.write_meta(meta)
            yield
        finally:
            os.close(fd)  # releases the lock

    def _check_owner(self, meta: dict[str, Any], resume: bool) -> None:
        old = self.read_meta()
        if old is None:
            foreign = sorted(n for n in os.listdir(self.root) if not _is_temporary(n))
            if foreign:
                shown = ", ".join(repr(n) for n in foreign[:3]) + (", ..." if len(foreign) > 3 else "")
                raise StoreError(
                    f"{self.root}: holds files that are not an optsched sweep's ({shown}); "
                    "choose an empty or new folder for --out"
                )
            return
        stored = self._parts()
        if _comparable(old) != _comparable(meta) and not resume:
            name = old["spec"].get("name")
            raise StoreError(
                f"{self.root}: holds the sweep {name!r} of another spec or mode ({META}): add --resume to add "
                "this sweep's cells to it, or choose another --out"
            )
        if stored and not resume:
            raise StoreError(
                f"{self.root}: already holds {len(stored)} stored cells: "
                "add --resume to complete that sweep, or choose another --out"
            )
        for path in stored:
            self._checked(path)
