"""optsched: provably optimal and provably bounded schedules for LLM inference serving.

Data flows one way: instance -> formulation -> solver backend -> schedule -> replay -> report/export.
The entry points are :func:`solve`, :func:`bound` and :func:`simulate` (:mod:`optsched.api`).

The names below are imported on first use (PEP 562), so ``import optsched`` loads nothing but
this file; ``optsched.solve`` then loads what a solve needs, and a formulation loads its solvers
only when it runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the names, for type checkers and editors
    from .api import bound, simulate, solve
    from .costmodel import CostModel, load_cost_model
    from .instance import Instance, InstanceError, Limits, Request, load_instance
    from .options import OptionError
    from .result import Bound, SolveResult, Status
    from .schedule import Batch, Item, Schedule, load_schedule, replay
    from .workload import load_trace, load_trace_csv

from .registry import lazy_exports

#: Each public name and the module that defines it.
_EXPORTS: dict[str, str] = {
    "solve": ".api",
    "bound": ".api",
    "simulate": ".api",
    "CostModel": ".costmodel",
    "load_cost_model": ".costmodel",
    "Instance": ".instance",
    "InstanceError": ".instance",
    "Limits": ".instance",
    "Request": ".instance",
    "load_instance": ".instance",
    "OptionError": ".options",
    "Bound": ".result",
    "SolveResult": ".result",
    "Status": ".result",
    "Batch": ".schedule",
    "Item": ".schedule",
    "Schedule": ".schedule",
    "load_schedule": ".schedule",
    "replay": ".schedule",
    "load_trace": ".workload",
    "load_trace_csv": ".workload",
}

#: The public names (the keys of _EXPORTS; a test checks that they agree).
__all__ = [
    "Batch",
    "Bound",
    "CostModel",
    "Instance",
    "InstanceError",
    "Item",
    "Limits",
    "OptionError",
    "Request",
    "Schedule",
    "SolveResult",
    "Status",
    "bound",
    "load_cost_model",
    "load_instance",
    "load_schedule",
    "load_trace",
    "load_trace_csv",
    "replay",
    "simulate",
    "solve",
]

__version__ = "0.1.0"

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
