"""Lazy registries: tables mapping a name to ``"module:function"``, imported only when used.

Policies (:mod:`optsched.policies`), formulations (:mod:`optsched.problems`) and exporters
(:mod:`optsched.export`) keep such tables so that the CLI starts fast and one formulation's
dependencies never load for another.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any, Callable, Mapping


def resolve(table: Mapping[str, str], name: str, what: str) -> Callable[..., Any]:
    """The function registered under ``name`` in ``table``.

    Raises
    ------
    KeyError
        Naming ``what`` was looked up and the known names.
    """
    try:
        target = table[name]
    except KeyError:
        known = ", ".join(sorted(table)) or "none registered"
        raise KeyError(f"unknown {what} {name!r} (known: {known})") from None
    module, _, attr = target.partition(":")
    return getattr(import_module(module), attr)
