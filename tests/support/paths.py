"""Where the tests find the repository's files and the shared data (``../shared/data``)."""

from __future__ import annotations

import os
from pathlib import Path

#: The repository's root (its instances/, docs/ and models/ folders).
REPO = Path(__file__).resolve().parents[2]
#: The shipped instances.
INSTANCES = REPO / "instances"


def shared_data() -> Path | None:
    """The shared data folder: ``$OPTSCHED_SHARED/data`` when that variable is set, else
    ``<repo>/../shared/data`` or the same under any ancestor of the repository (a worktree);
    None when there is none."""
    if "OPTSCHED_SHARED" in os.environ:
        candidate = Path(os.environ["OPTSCHED_SHARED"]) / "data"
        return candidate if candidate.is_dir() else None
    for base in REPO.parents:
        candidate = base / "shared" / "data"
        if candidate.is_dir():
            return candidate
    return None
