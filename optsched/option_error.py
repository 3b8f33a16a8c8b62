"""The error of a formulation option (:mod:`optsched.options`), apart: catching it loads no pydantic."""

from __future__ import annotations

__all__ = ["OptionError"]


class OptionError(ValueError):
    """A formulation option that is unknown, of the wrong type, out of range or without effect (exit 2)."""
