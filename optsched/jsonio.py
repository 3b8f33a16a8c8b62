"""Atomic file output: nothing half-written on failure.

Every file optsched writes (schedules, instances, profiles, reports) goes through
:func:`write_text_atomic`: the text is written to a temporary file in the target's folder and
renamed over the target only once complete.
"""

from __future__ import annotations

import gc
import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

__all__ = ["atomic_output", "dumps_instance", "dumps_rows", "gc_paused", "write_json_atomic", "write_text_atomic"]


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


@contextmanager
def atomic_output(path: str | Path) -> Iterator[Path]:
    """A temporary path in ``path``'s folder, renamed over ``path`` when the block completes.

    For writers that take a file name (Parquet, plots); on any failure the temporary file is
    removed and ``path`` is left as it was.
    """
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent or ".")
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, _file_mode())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename."""
    with atomic_output(path) as tmp:
        tmp.write_text(text)


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
