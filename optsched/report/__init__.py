"""Bound reports: every proven lower bound, the best schedule found in a time budget and every
policy, with their gaps; as a terminal table, JSON and a self-contained HTML page (docs/report.md).

- :func:`gather_bounds` lists the applicable bounds of an instance (generic and registered bounders);
- :func:`build_report` gathers a whole :class:`Report` under one time limit;
- :func:`report_to_dict`, :func:`report_table`, :func:`write_html` present it.
"""

from typing import TYPE_CHECKING, Any

from .gather import SCHEDULE_PROBLEMS, build_report, gather_bounds
from .output import report_rows, report_to_dict
from .records import BoundEntry, PolicyRun, Report, SolverRun
from .terminal import report_table

if TYPE_CHECKING:  # loaded on first use (below)
    from .html import report_html, write_html

__all__ = [
    "SCHEDULE_PROBLEMS",
    "BoundEntry",
    "PolicyRun",
    "Report",
    "SolverRun",
    "build_report",
    "gather_bounds",
    "report_html",
    "report_rows",
    "report_table",
    "report_to_dict",
    "write_html",
]


def __getattr__(name: str) -> Any:
    """The HTML writers load matplotlib: import them only when asked for (PEP 562)."""
    if name in ("report_html", "write_html"):
        from . import html

        return getattr(html, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
