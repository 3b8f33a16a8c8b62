"""Exporters: turn a replay-checked schedule into what an external engine executes (``vllm-replay``)
or a viewer shows (``chrome-trace``: Chrome / Perfetto trace events).

``EXPORTERS[name]`` maps a ``--format`` name to ``"module:function"``; the function has the signature
``export(instance, schedule, options: dict) -> dict`` (the JSON object written to ``--out``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..registry import resolve

EXPORTERS: dict[str, str] = {
    "chrome-trace": "optsched.export.chrome_trace:export",
    "vllm-replay": "optsched.export.vllm_replay:export",
}


def exporter_for(name: str) -> Callable[..., Any]:
    """The export function registered for ``--format name``."""
    return resolve(EXPORTERS, name, "export format")
