"""The one grammar of integers and decimal numbers written as text (trace cells, command-line options).

An integer is ASCII digits with an optional sign where the caller allows one (``-`` only for signed
values), surrounded by optional blanks (spaces, tabs): no ``0x`` prefix, no ``_`` separators, no
Arabic-Indic or full-width digits, no exponent. At most 18 digits, so every value fits a 64-bit
integer where the value is stored as one (:func:`parse_whole`); options, whose callers check a
range, take up to :data:`MAX_OPTION_DIGITS` digits. A decimal number is an integer part and/or a
fraction with an optional decimal exponent (``12``, ``-0.5``, ``.25``, ``1e-3``), finite. Every
parser of a number the user wrote goes through here; JSON and YAML values are typed by their parsers
and checked strictly (a boolean is never an integer).
"""

from __future__ import annotations

import math
import re

__all__ = ["MAX_DIGITS", "MAX_OPTION_DIGITS", "NumberSyntaxError", "parse_decimal", "parse_int", "parse_whole"]

#: Most digits of a stored integer: every 18-digit integer fits a signed 64-bit integer.
MAX_DIGITS = 18

#: Most digits of an option's integer (its range is the caller's; Python refuses beyond 4300).
MAX_OPTION_DIGITS = 4000

_INT = re.compile(r"[ \t]*([+-]?)([0-9]+)[ \t]*", re.ASCII)
_WHOLE = re.compile(r"[ \t]*([+-]?)([0-9]+)(?:\.0*)?[ \t]*", re.ASCII)
_DECIMAL = re.compile(r"[ \t]*[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,4})?[ \t]*", re.ASCII)


class NumberSyntaxError(ValueError):
    """Text that is not a number of the grammar; the message says which kind was expected."""


def parse_int(text: str, *, signed: bool = False) -> int:
    """An integer: ASCII digits, a sign only when ``signed``, at most :data:`MAX_OPTION_DIGITS` digits.

    Raises
    ------
    NumberSyntaxError
        For anything else (``0x64``, ``1_000``, ``١٢``, ``true``, ``1.5``).
    """
    match = _INT.fullmatch(text)
    if match is None or (match.group(1) and not signed):
        kind = "an integer" if signed else "a non-negative integer"
        raise NumberSyntaxError(f"not {kind} of ASCII digits ({text!r})")
    if len(match.group(2).lstrip("0")) > MAX_OPTION_DIGITS:
        raise NumberSyntaxError(f"more than {MAX_OPTION_DIGITS} digits ({text[:40]!r})")
    value = int(match.group(2))
    return -value if match.group(1) == "-" else value


def parse_whole(text: str) -> int:
    """A count of a data file: :func:`parse_int`'s signed digits, also written with a zero fraction
    (``44.0``: tables written by float-typed tools); the caller checks the range."""
    match = _WHOLE.fullmatch(text)
    if match is None:
        raise NumberSyntaxError(f"not an integer ({text[:40]!r})")
    if len(match.group(2).lstrip("0")) > MAX_DIGITS:
        raise NumberSyntaxError(f"more than {MAX_DIGITS} digits ({text[:40]!r})")
    value = int(match.group(2))
    return -value if match.group(1) == "-" else value


def parse_decimal(text: str) -> float:
    """A finite decimal number (``inf``, ``nan``, hexadecimal and ``_`` are refused)."""
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is not None and not math.isfinite(value):
        raise NumberSyntaxError(f"not a finite number ({text[:40]!r})")
    if value is None or _DECIMAL.fullmatch(text) is None:
        raise NumberSyntaxError(f"not a number ({text[:40]!r})")
    return value
