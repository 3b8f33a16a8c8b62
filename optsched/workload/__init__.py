"""Workloads as users have them: public trace formats in, transformed into instances.

- :mod:`optsched.workload.formats`: the trace layouts (:data:`FORMATS`) and their detection;
- :mod:`optsched.workload.loaders`: :func:`load_trace` (any format, gzip, BOM, CRLF, quoting);
- :mod:`optsched.workload.transforms`: :class:`WorkloadTransforms` and :func:`apply_transforms`
  (first N, time window, sampling, rate scaling, length clipping, offline, default SLOs).
"""

from .errors import WorkloadError
from .formats import FORMATS, TraceFormat, detect_format
from .loaders import is_trace_path, load_trace, load_trace_csv, trace_format_of
from .transforms import WorkloadTransforms, apply_transforms, parse_window

__all__ = [
    "FORMATS",
    "TraceFormat",
    "WorkloadError",
    "WorkloadTransforms",
    "apply_transforms",
    "detect_format",
    "is_trace_path",
    "load_trace",
    "load_trace_csv",
    "parse_window",
    "trace_format_of",
]
