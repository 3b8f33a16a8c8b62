"""Files in and out: atomic output, nothing half-written on failure.

Every file optsched writes (schedules, instances, profiles, plans, plots, reports, request tables)
goes through :func:`atomic_output` (or :func:`write_text_atomic`, built on it): the content is
written to a uniquely named temporary file in the target's folder and renamed over the target only
once complete; on any failure (an exception, Ctrl-C) the temporary file is removed and the target
is left as it was.

Targets (:func:`output_target`, also called by the commands before any work): only regular files
are written. A path that does not exist yet is created in its folder, which must exist and be
writable; an existing regular file is replaced (keeping its permission bits); a symbolic link is
followed and the file it points to is written, the link staying a link (as a shell's ``>`` does);
a folder, a device, a pipe or a socket is refused. Every refusal and every failed write is an
:class:`OutputError` naming the file (exit code 2 on the command line).
"""

from __future__ import annotations

import gc
import json
import os
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

__all__ = [
    "OutputError",
    "atomic_output",
    "dumps_instance",
    "dumps_rows",
    "gc_paused",
    "output_target",
    "write_json_atomic",
    "write_text_atomic",
]


class OutputError(ValueError):
    """An output file that cannot be written; the message names it."""


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while building millions of acyclic objects (a large
    schedule's JSON): its repeated full scans otherwise more than double the time."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _file_mode() -> int:
    """The mode a plainly created file would get (mkstemp creates 0o600)."""
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


def output_target(path: str | Path) -> Path:
    """The regular file that writing ``path`` creates or replaces (see the module docstring).

    Raises
    ------
    OutputError
        When ``path`` (or the file a symbolic link points to) is a folder, a device, a pipe or a
        socket, or its folder is missing or not writable.
    """
    given = Path(path)
    target = Path(os.path.realpath(given)) if given.is_symlink() else given
    link = f" (the symbolic link's target {str(target)!r})" if target is not given else ""
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise OutputError(f"{path}: cannot write{link}: {exc.strerror}") from None
    if mode is not None and stat.S_ISDIR(mode):
        raise OutputError(f"{path}: is a folder{link}; give a file name")
    if mode is not None and not stat.S_ISREG(mode):
        raise OutputError(f"{path}: is not a regular file{link} (a device, pipe or socket); optsched writes only files")
    folder = target.parent
    if not folder.is_dir():
        raise OutputError(f"{path}: output folder {str(folder.resolve())!r} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"{path}: output folder {str(folder.resolve())!r} is not writable")
    return target


@contextmanager
def atomic_output(path: str | Path) -> Iterator[Path]:
    """A temporary path in the folder of ``path``'s :func:`target <output_target>`, renamed over it
    when the block completes.

    For writers that take a file name (Parquet, plots). On any failure the temporary file is
    removed and the target is left as it was; an :class:`OSError` (a full disk, the target turned
    into a folder meanwhile) becomes an :class:`OutputError` naming ``path``.
    """
    target = output_target(path)
    try:
        keep = stat.S_IMODE(os.stat(target).st_mode) if target.exists() else _file_mode()
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise OutputError(f"{path}: cannot write: {exc.strerror}") from None
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, keep)
        os.replace(tmp, target)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise OutputError(f"{path}: cannot write: {exc.strerror or exc}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename."""
    with atomic_output(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json_atomic(path: str | Path, data: Any) -> None:
    """Write ``data`` as indented JSON, atomically."""
    write_text_atomic(path, json.dumps(data, indent=1) + "\n")


def dumps_rows(data: dict[str, Any], key: str) -> str:
    """JSON text of ``data`` with the list ``data[key]`` written one element per line.

    Readable and diff-friendly, and fast: each element goes through the C encoder (an ``indent``
    makes :mod:`json` fall back to its pure-Python encoder, ~20x slower on large schedules).
    """
    head = {k: v for k, v in data.items() if k != key}
    fields = [f" {json.dumps(k)}: {json.dumps(v)}" for k, v in head.items()]
    rows = ",\n  ".join(json.dumps(r) for r in data.get(key, []))
    fields.append(f' {json.dumps(key)}: [\n  {rows}\n ]' if rows else f" {json.dumps(key)}: []")
    return "{\n" + ",\n".join(fields) + "\n}\n"


def dumps_instance(data: dict[str, Any]) -> str:
    """An instance JSON object as text with one request per line."""
    return dumps_rows(data, "requests")
