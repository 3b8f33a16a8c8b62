"""Exporters: turn a replay-checked schedule into what an external engine executes.

``EXPORTERS[name]`` maps a ``--format`` name to ``"module:function"``; the function has the signature
``export(instance, schedule, options: dict) -> dict`` (the JSON object written to ``--out``).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any, Callable

EXPORTERS: dict[str, str] = {
    "vllm-replay": "optsched.export.vllm_replay:export",
}


def exporter_for(name: str) -> Callable[..., Any]:
    """The export function registered for ``--format name``."""
    try:
        target = EXPORTERS[name]
    except KeyError:
        raise KeyError(f"unknown export format {name!r} (known: {', '.join(sorted(EXPORTERS))})") from None
    module, _, attr = target.partition(":")
    return getattr(import_module(module), attr)
