"""Workloads as users have them: public trace formats in, transformed into instances.

- :mod:`optsched.workload.transforms`: :class:`WorkloadTransforms` and :func:`apply_transforms`
  (first N, time window, sampling, rate scaling, length clipping, offline, default SLOs).
"""

from .errors import WorkloadError
from .transforms import WorkloadTransforms, apply_transforms, parse_window

__all__ = ["WorkloadError", "WorkloadTransforms", "apply_transforms", "parse_window"]
