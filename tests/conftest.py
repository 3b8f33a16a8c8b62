"""Shared test helpers: where the real data of ../shared/data lives (skip when absent)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def shared_data() -> Path | None:
    """``<repo>/../shared/data`` (or the same under any ancestor of the repo, e.g. for worktrees)."""
    for base in REPO.parents:
        candidate = base / "shared" / "data"
        if candidate.is_dir():
            return candidate
    return None


@pytest.fixture
def data_dir() -> Path:
    found = shared_data()
    if found is None:
        pytest.skip("../shared/data (real traces and GPU profiles) is not present")
    return found
