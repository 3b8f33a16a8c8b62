"""The trace formats optsched reads: one :class:`TraceFormat` row per public layout.

Each format names the columns (or JSON keys) of the arrival time, the prompt length and the output
length, the unit of the time, and what it drops or ignores. :func:`detect_format` picks the format
whose published columns a CSV header holds (the most specific first); JSON Lines files are Mooncake
traces. docs/instances.md lists every format with its columns and notes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from .errors import WorkloadError

__all__ = ["FORMATS", "TraceFormat", "check_header", "detect_format", "format_named"]


@dataclass(frozen=True)
class TraceFormat:
    """One trace layout.

    Attributes
    ----------
    name
        The ``--format`` name.
    title
        What the layout is, for help and docs.
    columns
        The published columns (header names, or JSON keys); a CSV header holding all of them is
        detected as this format.
    prompt, output
        Columns of the prompt and output lengths (tokens).
    arrival
        Column of the arrival time (None: every request arrives at 0).
    time_unit
        ``s`` (seconds), ``ms`` (milliseconds) or ``datetime`` (``YYYY-MM-DD hh:mm:ss[.fffffff][+hh:mm]``).
    jsonl
        JSON Lines (one object per line) instead of CSV.
    failed_if_no_output
        Rows with 0 output tokens are failed requests: dropped and counted in a note.
    model_column
        Column that ``model=NAME`` filters on (None: the option does not apply).
    notes
        What the loader ignores, said with every load.
    """

    name: str
    title: str
    columns: tuple[str, ...]
    prompt: str
    output: str
    arrival: str | None = None
    time_unit: Literal["s", "ms", "datetime"] | None = None
    jsonl: bool = False
    failed_if_no_output: bool = False
    model_column: str | None = None
    notes: tuple[str, ...] = ()

    @property
    def needed(self) -> tuple[str, ...]:
        """The columns read (arrival, prompt, output)."""
        return tuple(c for c in (self.arrival, self.prompt, self.output) if c is not None)


FORMATS: dict[str, TraceFormat] = {
    f.name: f
    for f in (
        TraceFormat(
            "vidur",
            "Vidur/Splitwise request trace (seconds)",
            ("arrived_at", "num_prefill_tokens", "num_decode_tokens"),
            prompt="num_prefill_tokens",
            output="num_decode_tokens",
            arrival="arrived_at",
            time_unit="s",
        ),
        TraceFormat(
            "vidur-lengths",
            "Vidur length-only trace (every request arrives at 0)",
            ("num_prefill_tokens", "num_decode_tokens"),
            prompt="num_prefill_tokens",
            output="num_decode_tokens",
        ),
        TraceFormat(
            "azure",
            "Azure LLM inference trace 2023 / 2024 (date-times)",
            ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
            prompt="ContextTokens",
            output="GeneratedTokens",
            arrival="TIMESTAMP",
            time_unit="datetime",
        ),
        TraceFormat(
            "azure-multimodal",
            "Azure multimodal LLM inference trace 2025 (date-times)",
            ("TIMESTAMP", "NumImages", "ContextTokens", "GeneratedTokens"),
            prompt="ContextTokens",
            output="GeneratedTokens",
            arrival="TIMESTAMP",
            time_unit="datetime",
            notes=("NumImages is ignored: images are not modelled (ContextTokens is the prompt length)",),
        ),
        TraceFormat(
            "burstgpt",
            "BurstGPT (seconds; rows with 0 response tokens are failed requests)",
            ("Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type"),
            prompt="Request tokens",
            output="Response tokens",
            arrival="Timestamp",
            time_unit="s",
            failed_if_no_output=True,
            model_column="Model",
        ),
        TraceFormat(
            "mooncake",
            "Mooncake JSON Lines (milliseconds)",
            ("timestamp", "input_length", "output_length", "hash_ids"),
            prompt="input_length",
            output="output_length",
            arrival="timestamp",
            time_unit="ms",
            jsonl=True,
            notes=("hash_ids (prefix-cache block hashes) are ignored: optsched does not model prefix caching",),
        ),
        TraceFormat(
            "splitwise-sim",
            "SplitwiseSim request trace (seconds)",
            (
                "request_id",
                "request_type",
                "application_id",
                "arrival_timestamp",
                "batch_size",
                "prompt_size",
                "token_size",
            ),
            prompt="prompt_size",
            output="token_size",
            arrival="arrival_timestamp",
            time_unit="s",
        ),
    )
}


def format_named(name: str) -> TraceFormat:
    """The format called ``name`` (bad input naming the known ones otherwise)."""
    try:
        return FORMATS[name]
    except KeyError:
        raise WorkloadError(f"--format: unknown trace format {name!r} (known: {', '.join(FORMATS)})") from None


#: Header names that look like an arrival time (a column a lengths-only read would silently drop).
_TIME_LIKE = re.compile(r"time|arriv|date|clock|epoch|(^|_)ts($|_)|_at$", re.IGNORECASE)


def check_header(header: Sequence[str], source: str) -> None:
    """Header names are printable text: a character such as a second byte-order mark makes a
    column unrecognisable, so it is an error naming the column rather than a column left unread.
    A name given twice is an error too: which column is read would be a guess."""
    seen: dict[str, int] = {}
    for k, name in enumerate(header, start=1):
        if name and name in seen:  # (empty names: columns no format reads)
            raise WorkloadError(f"{source}: line 1, column {k}: header name {name!r} repeats column {seen[name]}")
        seen[name] = k
        if not name.isprintable():
            bad = next(c for c in name if not c.isprintable())
            raise WorkloadError(
                f"{source}: line 1, column {k}: header name {name!r} holds the invisible character "
                f"U+{ord(bad):04X}{' (a second byte-order mark)' if bad == chr(0xFEFF) else ''}; remove it"
            )


def detect_format(header: Sequence[str], source: str) -> TraceFormat:
    """The CSV format whose published columns ``header`` holds, the one with most columns first.

    A header detected as a format without a time (every request at 0) but holding a column whose
    name looks like a time is an error: that column would be dropped silently; ``--format`` reads
    such a file as the format named.
    """
    check_header(header, source)
    have = set(header)
    for fmt in sorted((f for f in FORMATS.values() if not f.jsonl), key=lambda f: -len(f.columns)):
        if have.issuperset(fmt.columns):
            timelike = [h for h in header if fmt.arrival is None and _TIME_LIKE.search(h)]
            if timelike:
                timed = [f"{f.name}: {f.arrival!r}" for f in FORMATS.values() if f.arrival and not f.jsonl]
                raise WorkloadError(
                    f"{source}: line 1: column {timelike[0]!r} looks like an arrival time, but the header "
                    f"matches format {fmt.name!r}, which reads no time (every request would arrive at 0); "
                    f"rename it to a format's time column ({', '.join(timed)}) or pass --format {fmt.name}"
                )
            return fmt
    raise WorkloadError(
        f"{source}: line 1: header {list(header)!r} matches no trace format; pass --format "
        f"({', '.join(FORMATS)}; docs/instances.md lists their columns)"
    )
