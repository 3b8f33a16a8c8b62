"""The workload package's bad-input error."""

from __future__ import annotations

from ..instance import InstanceError

__all__ = ["WorkloadError"]


class WorkloadError(InstanceError):
    """Bad trace or transform input (exit 2 on the command line); the message names the file, the
    line and the column, or the transform."""
