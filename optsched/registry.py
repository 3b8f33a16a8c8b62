"""Lazy registries: tables mapping a name to ``"module:function"``, imported only when used.

Policies (:mod:`optsched.policies`), formulations (:mod:`optsched.problems`) and exporters
(:mod:`optsched.export`) keep such tables so that the CLI starts fast and one formulation's
dependencies never load for another. :func:`lazy_exports` does the same for a package's public
names (``optsched.solve``, ``optsched.load_instance``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


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
    found: Callable[..., Any] = getattr(import_module(module), attr)
    return found


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for a package whose public names load on first use (PEP 562).

    ``exports`` maps each name to the module defining it, relative to ``package`` (``".solve"``).
    A package assigns them: ``__getattr__, __dir__ = lazy_exports(__name__, {...})``.
    """
    namespace = sys.modules[package].__dict__

    def getattr_(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(module, package), name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted({*namespace, *exports})

    return getattr_, dir_
