"""Files in and out: strict reading of JSON and TOML inputs, atomic output.

Inputs (:func:`read_json`, :func:`loads_json`, :func:`read_toml`, :func:`read_text`): UTF-8 text
(a leading byte-order mark is allowed; another encoding is refused naming the line and column of the
first bad byte), standard JSON only (no ``NaN``/``Infinity``, no number beyond a float's range), no key twice in one
object (JSON itself lets the last win silently; here it is an error naming the key), and nesting within the
JSON decoder's recursion limit (about a thousand levels). Each refusal raises the caller's error class with a one-line
message that names the file, so a loader raises its own error type (exit code 2 on the command line).

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
import math
import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .exiting import exit_held
from .interrupt import held_signals

__all__ = [
    "MAX_INPUT_BYTES",
    "MAX_STREAM_BYTES",
    "OutputError",
    "atomic_output",
    "dumps_instance",
    "default_file_mode",
    "dumps_rows",
    "finite_json",
    "gc_paused",
    "loads_json",
    "output_target",
    "read_json",
    "read_text",
    "read_toml",
    "write_json_atomic",
    "write_text_atomic",
]


class OutputError(ValueError):
    """An output file that cannot be written; the message names it."""


#: Most bytes of a JSON, TOML or YAML input (1 GiB: a schedule of tens of millions of items). A
#: regular file's size is checked before reading.
MAX_INPUT_BYTES = 1 << 30

#: Most bytes read from an input that is not a regular file (a device such as ``/dev/zero``, a
#: pipe, a process substitution): read in chunks and refused once past it, so that an endless
#: stream costs at most this much memory.
MAX_STREAM_BYTES = 1 << 28


def read_bytes_limited(path: str | Path, error: type[Exception], limit: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of ``path``, at most ``limit`` for a regular file and :data:`MAX_STREAM_BYTES`
    for anything else (``error`` names the file and the limit beyond it)."""
    try:
        with open(path, "rb") as fh:
            regular = stat.S_ISREG(os.fstat(fh.fileno()).st_mode)
            if regular and os.fstat(fh.fileno()).st_size > limit:
                raise error(f"{path}: larger than {limit:,} bytes, the most an input file may have")
            if regular:
                raw = fh.read()
            else:
                limit = min(limit, MAX_STREAM_BYTES)
                buffer = bytearray()
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    buffer += chunk
                    if len(buffer) > limit:
                        break
                raw = bytes(buffer)
    except OSError as exc:
        raise error(f"{path}: cannot read file ({exc.strerror})") from None
    if len(raw) > limit:
        raise error(f"{path}: more than {limit:,} bytes (not a regular file), the most an input file may have")
    return raw


def read_text(path: str | Path, error: type[Exception]) -> str:
    """The UTF-8 text of ``path`` (a byte-order mark dropped), at most :data:`MAX_INPUT_BYTES`;
    ``error`` names the file when it cannot be read, is too large or is not UTF-8 (with the line
    and column of the first bad byte)."""
    raw = read_bytes_limited(path, error)
    if raw[:2] == b"\x1f\x8b":
        raise error(f"{path}: a gzip-compressed file: this file is read as plain text (decompress it first)")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise error(f"{path}: not UTF-8 text: byte 0x{raw[exc.start]:02x} at line {line}, column {column}") from None


class _DuplicateKey(Exception):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        key = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        owner = obj.get("id") if isinstance(obj.get("id"), str) else None
        raise _DuplicateKey(
            f"key {key!r} given twice in one object" + (f" (the one with id {owner!r})" if owner else "")
        )
    return obj


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of range of a number")
    return value


def loads_json(text: str, source: str, error: type[Exception]) -> Any:
    """Parse JSON ``text`` strictly (module docstring); ``error`` names ``source`` and the line."""
    try:
        return json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant, parse_float=_finite)
    except json.JSONDecodeError as exc:
        raise error(f"{source}: malformed JSON at line {exc.lineno}: {exc.msg}") from None
    except _DuplicateKey as exc:
        raise error(f"{source}: malformed JSON: {exc}") from None
    except ValueError as exc:  # parse_constant, parse_float
        raise error(f"{source}: malformed JSON: {exc}") from None
    except RecursionError:  # the decoder's own limit (about a thousand levels)
        raise error(f"{source}: malformed JSON: arrays or objects nested too deeply") from None


def read_json(path: str | Path, error: type[Exception]) -> Any:
    """The JSON file ``path`` parsed strictly (module docstring); ``error`` names the file."""
    return loads_json(read_text(path, error), str(path), error)


def read_toml(path: str | Path, error: type[Exception]) -> dict[str, Any]:
    """The TOML file ``path`` parsed (UTF-8, as TOML requires); ``error`` names the file and the
    place of a syntax error."""
    import tomllib

    text = read_text(path, error)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{path}: malformed TOML: {exc}") from None
    except RecursionError:
        raise error(f"{path}: malformed TOML: arrays or tables nested too deeply") from None


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


def default_file_mode() -> int:
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


def _make_temporary(target: Path, made: list[str]) -> int:
    """Create a new empty file in ``target``'s folder, its name appended to ``made`` while Ctrl-C and
    SIGTERM are held (so a caller that removes ``made``'s files on any exception never leaves it);
    the mode ``target`` has, or a new file's."""
    with held_signals():
        keep = stat.S_IMODE(os.stat(target).st_mode) if target.exists() else default_file_mode()
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        made.append(tmp)
        os.close(fd)
    return keep


@contextmanager
def atomic_output(path: str | Path) -> Iterator[Path]:
    """A temporary path in the folder of ``path``'s :func:`target <output_target>`, renamed over it
    when the block completes.

    For writers that take a file name (Parquet, plots). On any failure, Ctrl-C included, the
    temporary file is removed and the target is left as it was; an :class:`OSError` (a full disk,
    the target turned into a folder meanwhile) becomes an :class:`OutputError` naming ``path``.
    """
    target = output_target(path)
    made: list[str] = []
    with exit_held():  # a time limit's ending waits for the file (optsched.exiting)
        try:
            keep = _make_temporary(target, made)
            yield Path(made[0])
            os.chmod(made[0], keep)
            os.replace(made[0], target)
        except BaseException as exc:
            for name in made:
                Path(name).unlink(missing_ok=True)
            if isinstance(exc, OSError):
                raise OutputError(f"{path}: cannot write: {exc.strerror or exc}") from None
            raise


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename."""
    with atomic_output(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def finite_json(value: Any) -> Any:
    """``value`` (dicts, lists and tuples within) with every non-finite float as None: what every
    JSON this package writes holds instead of ``NaN`` and ``Infinity``, which standard JSON (and
    :func:`loads_json`) rejects; JSON's ``null``."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(v) for v in value]
    return value


def write_json_atomic(path: str | Path, data: Any) -> None:
    """Write ``data`` as indented JSON (:func:`finite_json`), atomically."""
    write_text_atomic(path, json.dumps(finite_json(data), indent=1, allow_nan=False) + "\n")


def dumps_rows(data: dict[str, Any], key: str) -> str:
    """JSON text of ``data`` with the list ``data[key]`` written one element per line.

    Readable and diff-friendly, and fast: each element goes through the C encoder (an ``indent``
    makes :mod:`json` fall back to its pure-Python encoder, ~20x slower on large schedules).
    """
    head = {k: finite_json(v) for k, v in data.items() if k != key}
    fields = [f" {json.dumps(k)}: {json.dumps(v)}" for k, v in head.items()]
    rows = ",\n  ".join(json.dumps(r) for r in data.get(key, []))
    fields.append(f" {json.dumps(key)}: [\n  {rows}\n ]" if rows else f" {json.dumps(key)}: []")
    return "{\n" + ",\n".join(fields) + "\n}\n"


def dumps_instance(data: dict[str, Any]) -> str:
    """An instance JSON object as text with one request per line."""
    return dumps_rows(data, "requests")
