"""Traces for ``optsched info`` tests: a trace CSV repeated to a number of rows."""

from __future__ import annotations

from pathlib import Path


def repeated_trace(source: Path, rows: int, out: Path) -> Path:
    """``source`` (a splitwise CSV: arrived_at, num_prefill_tokens, num_decode_tokens) repeated,
    each copy shifted past the previous one's last arrival, to ``rows`` rows in ``out``."""
    header, *lines = source.read_text().splitlines()
    last = float(lines[-1].split(",")[0])
    written = [header]
    copy = 0
    while len(written) <= rows:
        for line in lines[: rows + 1 - len(written)]:
            arrival, prompt, output = line.split(",")
            written.append(f"{float(arrival) + copy * (last + 1.0):.6f},{prompt},{output}")
        copy += 1
    out.write_text("\n".join(written) + "\n")
    return out
