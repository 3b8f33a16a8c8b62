"""optsched: provably optimal and provably bounded schedules for LLM inference serving.

Data flows one way: instance -> formulation -> solver backend -> schedule -> replay -> report/export.
"""

from .costmodel import CostModel, load_cost_model
from .instance import Instance, InstanceError, Limits, Request, load_instance
from .result import Bound, SolveResult
from .schedule import Batch, Item, Schedule, load_schedule, replay
from .workload import load_trace, load_trace_csv

__all__ = [
    "Batch",
    "Bound",
    "CostModel",
    "Instance",
    "InstanceError",
    "Item",
    "Limits",
    "Request",
    "Schedule",
    "SolveResult",
    "load_cost_model",
    "load_instance",
    "load_schedule",
    "load_trace",
    "load_trace_csv",
    "replay",
]

__version__ = "0.1.0"
