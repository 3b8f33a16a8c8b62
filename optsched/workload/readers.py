"""Reading trace files: transparent gzip, strict UTF-8 with the bad byte located, value parsers.

Every error is a :class:`~optsched.workload.errors.WorkloadError` naming the file, the line and,
for a value, the column.
"""

from __future__ import annotations

import codecs
import datetime
import gzip
import io
import os
import re
import stat
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, cast

from ..integers import NumberSyntaxError, parse_decimal, parse_whole
from ..jsonio import MAX_STREAM_BYTES
from .errors import WorkloadError

__all__ = [
    "GZIP_MAGIC",
    "MAX_TRACE_BYTES",
    "MAX_TRACE_ROWS",
    "READ_CHUNK",
    "TICKS_PER_SECOND",
    "BadValue",
    "datetime_ticks",
    "open_text",
    "parse_count",
    "parse_number",
    "file_name",
    "is_gzip_file",
    "open_binary",
    "read_chunks",
    "read_bytes",
    "read_head",
    "utf8_error",
]

GZIP_MAGIC = b"\x1f\x8b"
#: Date-time ticks per second (100 ns: the 7 fractional digits of the Azure traces).
TICKS_PER_SECOND = 10**7

#: Most bytes of a trace, after gunzipping (1 GiB: about 15 million rows of the widest format).
#: Counted while reading, so a small gzip of a huge file is refused before its content is held; a
#: device such as ``/dev/zero`` or a pipe is read up to :data:`optsched.jsonio.MAX_STREAM_BYTES`.
MAX_TRACE_BYTES = 1 << 30

#: Most lines of a trace (header and blank lines included): ten million requests take about 4 GB
#: once loaded as request objects.
MAX_TRACE_ROWS = 10**7

#: Most bytes of a chunk of :func:`read_chunks` but the one chunk of a plain regular file.
READ_CHUNK = 1 << 22
#: What a damaged or truncated gzip stream raises (zlib, ISA-L's errors turned into zlib's by
#: :func:`_gunzip`; GzipFile).
_DECOMPRESS_ERRORS = (EOFError, zlib.error, gzip.BadGzipFile)


def open_binary(path: str) -> IO[bytes]:
    """The file's bytes, gunzipped when it starts with the gzip magic number (whatever its name)."""
    try:
        raw = open(path, "rb")
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read file ({exc.strerror})") from None
    if raw.peek(2)[:2] == GZIP_MAGIC:
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    return raw


def open_text(path: str) -> IO[str]:
    """The file as UTF-8 text (a leading BOM dropped, line ends left to the csv module).

    Decoding errors surface as :class:`UnicodeDecodeError` while reading; :func:`utf8_error` turns
    one into the file's line and column.
    """
    return io.TextIOWrapper(open_binary(path), encoding="utf-8-sig", errors="strict", newline="")


def read_head(path: str, size: int = 65536) -> bytes:
    """The first ``size`` bytes of the (gunzipped) file, for format detection."""
    try:
        with open_binary(path) as fh:
            return fh.read(size)
    except _DECOMPRESS_ERRORS as exc:
        raise WorkloadError(f"{path}: damaged or truncated gzip data ({exc})") from None
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read file ({exc})") from None


def read_bytes(path: str, max_lines: int | None = MAX_TRACE_ROWS) -> bytes | bytearray:
    """The whole (gunzipped) file (:func:`read_chunks` joined), at most :data:`MAX_TRACE_BYTES`
    bytes (a file that is not a regular file: :data:`~optsched.jsonio.MAX_STREAM_BYTES`) and
    ``max_lines`` lines.

    Raises
    ------
    WorkloadError
        Naming the file and the limit (docs/instances.md, "Limits").
    """
    chunks = list(read_chunks(path, max_lines))
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def is_gzip_file(path: str) -> bool:
    """Whether ``path`` is a regular file that starts with the gzip magic number (False when unreadable)."""
    try:
        with open(path, "rb") as fh:
            return stat.S_ISREG(os.fstat(fh.fileno()).st_mode) and fh.read(2) == GZIP_MAGIC
    except OSError:
        return False


def read_chunks(path: str, max_lines: int | None = MAX_TRACE_ROWS) -> Iterator[bytes | bytearray]:
    """The (gunzipped) file chunk by chunk, within the limits of :func:`read_bytes`.

    Both limits are checked before the content grows past them: a plain regular file's size from
    the file system before it is read at once into one buffer (its one chunk), anything else (gzip,
    a device, a pipe) chunk by chunk while reading, in chunks of at most :data:`READ_CHUNK` bytes.
    A regular gzip file's first member is inflated by :mod:`zlib` directly (:func:`_gunzip`). A
    truncated or damaged gzip stream is named as such, when the chunk it spoils is asked for.

    Raises
    ------
    WorkloadError
        Naming the file and the limit (docs/instances.md, "Limits"), or the damage.
    """
    try:
        with open_binary(path) as fh:
            info = os.fstat(fh.fileno())
            regular = stat.S_ISREG(info.st_mode)
            limit = MAX_TRACE_BYTES if regular else MAX_STREAM_BYTES
            if regular and not isinstance(fh, gzip.GzipFile):
                if info.st_size > limit:
                    raise _too_large(path, limit, regular)
                data = bytearray(info.st_size)
                del data[cast(io.BufferedReader, fh).readinto(data) :]  # a file that shrank meanwhile
                _check_lines(path, data.count(b"\n"), max_lines)
                yield data
                return
            if regular:
                chunks = _gunzip(fh.fileobj)
            else:
                chunks = iter(lambda: fh.read(READ_CHUNK), b"")
            size = lines = 0
            for chunk in chunks:
                size, lines = size + len(chunk), lines + chunk.count(b"\n")
                if size > limit:
                    raise _too_large(path, limit, regular)
                _check_lines(path, lines, max_lines)
                yield chunk
    except _DECOMPRESS_ERRORS as exc:
        raise WorkloadError(f"{path}: damaged or truncated gzip data ({exc or type(exc).__name__})") from None
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read file ({exc.strerror or exc})") from None


def _gunzip(raw: IO[bytes]) -> Iterator[bytes]:
    """A regular gzip file's content: its first member (the usual file has one) inflated by ISA-L
    (:mod:`isal.isal_zlib`, zlib's interface at two to three times its speed), at most
    :data:`READ_CHUNK` bytes at a time; the zero bytes after it skipped and whatever else follows
    (more members, other bytes) read by :class:`gzip.GzipFile`'s rules. ISA-L is imported here, by
    the first gzip read (a process that reads no gzip file, such as the vLLM executor's, never needs
    it), and its errors are raised as :class:`zlib.error` with the same text."""
    from isal import isal_zlib

    inflater = isal_zlib.decompressobj(wbits=31)  # the gzip format: header and CRC checked
    isal_error = cast(type[Exception], isal_zlib.error)  # its type stubs call the class an instance
    pending = b""
    while not inflater.eof:
        pending = pending or raw.read(READ_CHUNK)
        try:
            chunk = inflater.decompress(pending, READ_CHUNK)
        except isal_error as exc:
            raise zlib.error(str(exc)) from None
        if not chunk and not pending:
            raise EOFError("Compressed file ended before the end-of-stream marker was reached")
        pending = inflater.unconsumed_tail
        if chunk:
            yield chunk
    rest = inflater.unused_data.lstrip(b"\0")  # the end of the bytes read so far
    while not rest:
        more = raw.read(READ_CHUNK)
        if not more:
            return
        rest = more.lstrip(b"\0")
    raw.seek(-len(rest), io.SEEK_CUR)
    with gzip.GzipFile(fileobj=raw, mode="rb") as members:
        yield from iter(lambda: members.read(READ_CHUNK), b"")


def _check_lines(path: str, lines: int, max_lines: int | None) -> None:
    if max_lines is not None and lines > max_lines:
        raise WorkloadError(
            f"{path}: more than {max_lines:,} lines, the most a trace may have (docs/instances.md, Limits)"
        )


def _too_large(path: str, limit: int, regular: bool) -> WorkloadError:
    kind = "" if regular else " (not a regular file)"
    return WorkloadError(
        f"{path}: more than {limit:,} bytes{kind}, the most a trace may have (docs/instances.md, Limits)"
    )


def utf8_error(path: str) -> WorkloadError:
    """Locate the first byte that is not UTF-8: an error naming the line and the column (1-based)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="strict")
    offset = 0  # bytes fed to the decoder before this chunk
    with open_binary(path) as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            pending = len(decoder.getstate()[0])
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as exc:
                bad = offset - pending + exc.start
                head = _prefix(path, bad)
                line = head.count(b"\n") + 1
                line_start = head.rfind(b"\n") + 1
                column = len(head[line_start:].decode("utf-8", errors="replace")) + 1
                return WorkloadError(
                    f"{path}: line {line}, column {column}: not UTF-8 "
                    f"(byte 0x{exc.object[exc.start]:02x}); save the file as UTF-8"
                )
            offset += len(chunk)
    return WorkloadError(f"{path}: not UTF-8 (a multi-byte character cut at the end)")


def _prefix(path: str, size: int) -> bytes:
    with open_binary(path) as fh:
        return fh.read(size)


class BadValue(ValueError):
    """A value that does not parse; the caller adds the file, line and column."""


def parse_count(text: str) -> int:
    """A token count: ASCII digits, also with a zero fraction (``44.0``): :func:`optsched.integers.parse_whole`."""
    try:
        return parse_whole(text)
    except NumberSyntaxError as exc:
        raise BadValue(str(exc)) from None


def parse_number(text: str) -> float:
    """A finite decimal number: :func:`optsched.integers.parse_decimal`."""
    try:
        return parse_decimal(text)
    except NumberSyntaxError as exc:
        raise BadValue(str(exc)) from None


_DATETIME = re.compile(
    r"\s*(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,7}))?\s*(Z|[+-]\d{2}(?::?\d{2})?)?\s*$",
    re.ASCII,
)


def datetime_ticks(text: str) -> int:
    """A date-time ``YYYY-MM-DD hh:mm:ss[.fffffff][Z|+hh:mm]`` as 100 ns ticks (UTC when offset given).

    Exact: up to 7 fractional digits are kept (``datetime`` would truncate the 7th).
    """
    match = _DATETIME.match(text)
    if match is None:
        raise BadValue(f"not a date-time YYYY-MM-DD hh:mm:ss[.fffffff][+hh:mm] ({text!r})")
    y, mo, d, h, mi, s, frac, tz = match.groups()
    try:
        day = datetime.date(int(y), int(mo), int(d)).toordinal()
    except ValueError as exc:
        raise BadValue(f"{exc} ({text!r})") from None
    hours, minutes, seconds = int(h), int(mi), int(s)
    if hours > 23 or minutes > 59 or seconds > 60:
        raise BadValue(f"time of day out of range ({text!r})")
    whole = day * 86400 + hours * 3600 + minutes * 60 + seconds
    if tz and tz != "Z":
        sign = -1 if tz[0] == "-" else 1
        digits = tz[1:].replace(":", "")
        if int(digits[:2]) > 23 or int(digits[2:4] or 0) > 59:
            raise BadValue(f"zone offset out of range, at most +-23:59 ({text!r})")
        whole -= sign * (int(digits[:2]) * 3600 + int(digits[2:4] or 0) * 60)
    return whole * TICKS_PER_SECOND + (int(frac.ljust(7, "0")) if frac else 0)


def file_name(path: str | Path) -> str:
    """The file's name without ``.gz`` and its format extension (the default instance name)."""
    name = Path(path).name
    for suffix in (".gz", ".csv", ".jsonl", ".json", ".txt"):
        name = name.removesuffix(suffix)
    return name
