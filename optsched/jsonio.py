"""Atomic file output: nothing half-written on failure.

Every file optsched writes (schedules, instances, profiles, reports) goes through
:func:`write_text_atomic`: the text is written to a temporary file in the target's folder and
renamed over the target only once complete.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["dumps_instance", "write_json_atomic", "write_text_atomic"]


def _file_mode() -> int:
    """The mode a plainly created file would get (mkstemp creates 0o600)."""
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent or ".")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.chmod(tmp, _file_mode())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: str | Path, data: Any) -> None:
    """Write ``data`` as indented JSON, atomically."""
    write_text_atomic(path, json.dumps(data, indent=1) + "\n")


def dumps_instance(data: dict[str, Any]) -> str:
    """An instance JSON object as text with one request per line (readable and diff-friendly)."""
    head = {k: v for k, v in data.items() if k != "requests"}
    lines = [json.dumps(r) for r in data.get("requests", [])]
    body = json.dumps(head, indent=1)[:-2]  # drop the closing "\n}"
    return body + ',\n "requests": [\n  ' + ",\n  ".join(lines) + "\n ]\n}\n"
