"""A trace's content handed to pyarrow's readers chunk by chunk, tallying what the fast path checks.

A gzip trace is inflated while pyarrow parses it (:func:`~optsched.workload.readers.read_chunks`
yields its content a few MiB at a time), so the whole text is never held in one buffer. What
:mod:`optsched.workload.arrow` checks on a whole file's bytes is tallied on the chunks as they
pass: the line count, the UTF-8 check, whether the rows after the header hold an ``x`` (pyarrow
reads ``0x64`` as an integer, the grammar does not), the first bytes (a BOM). A limit or a damaged
gzip stream met while reading is kept and raised by :meth:`TallyingStream.finish` once pyarrow has
stopped reading (an exception must not cross pyarrow's reader).
"""

from __future__ import annotations

import codecs
import io
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from .errors import WorkloadError

__all__ = ["TallyingStream"]

_NEWLINE = ord("\n")


class TallyingStream(io.RawIOBase):
    """A readable stream over ``chunks`` that tallies the checks of the whole-file path on the way."""

    def __init__(self, chunks: Iterator[bytes | bytearray]) -> None:
        super().__init__()
        self._chunks = chunks
        self._lock = threading.Lock()
        self._chunk = b""
        self._at = 0
        self._error: WorkloadError | None = None
        self._newlines = 0
        self._ends_with_newline = True  # an empty content has no last line
        self._decoder: Any = None
        self._utf8 = True
        self._in_header = True
        self.start = b""
        """The first three bytes of the content (fewer when it is shorter)."""
        self.x_in_rows = False
        """Whether an ``x`` or ``X`` follows the first line end."""

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        """At most ``size`` bytes of the content (all of the next chunk when ``size`` is negative or
        larger); empty at the end, or after an error kept for :meth:`finish`."""
        with self._lock:  # pyarrow reads on its I/O threads
            if self._at == len(self._chunk):
                self._chunk, self._at = self._next(), 0
            end = len(self._chunk) if size < 0 else min(self._at + size, len(self._chunk))
            out = self._chunk[self._at : end]  # the chunk itself (no copy) when it is read whole
            self._at = end
            return out

    def _next(self) -> bytes:
        """The next chunk, tallied (empty at the end or after an error)."""
        if self._error is not None:
            return b""
        try:
            chunk = bytes(next(self._chunks, b""))
        except WorkloadError as exc:
            self._error = exc
            return b""
        if chunk:
            self._tally(chunk)
        return chunk

    def _tally(self, chunk: bytes) -> None:
        self._newlines += int(np.count_nonzero(np.frombuffer(chunk, np.uint8) == _NEWLINE))  # 3x bytes.count
        self._ends_with_newline = chunk.endswith(b"\n")
        if len(self.start) < 3:
            self.start = (self.start + chunk)[:3]
        if not self.x_in_rows:
            rows = 0
            if self._in_header:
                rows = chunk.find(b"\n") + 1 or len(chunk)
                self._in_header = rows == len(chunk) and not self._ends_with_newline
            self.x_in_rows = chunk.find(b"x", rows) >= 0 or chunk.find(b"X", rows) >= 0
        if self._utf8 and (self._decoder is not None or not chunk.isascii()):
            self._decoder = self._decoder or codecs.getincrementaldecoder("utf-8")(errors="strict")
            try:
                self._decoder.decode(chunk)
            except UnicodeDecodeError:
                self._utf8 = False

    def finish(self) -> None:
        """Raise the error met while reading, if any: a
        :class:`~optsched.workload.errors.WorkloadError` naming the file or the limit."""
        if self._error is not None:
            raise self._error

    def is_utf8(self) -> bool:
        """Whether the content read is UTF-8 (a multi-byte character cut at the end is not)."""
        if self._utf8 and self._decoder is not None:
            try:
                self._decoder.decode(b"", final=True)
            except UnicodeDecodeError:
                self._utf8 = False
        return self._utf8

    def line_count(self) -> int:
        """Lines of the content read, a last line without its line end included."""
        return self._newlines + (0 if self._ends_with_newline else 1)
