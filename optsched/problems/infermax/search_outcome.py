"""What a local search over plans found: the one result record of :mod:`.key_search` and
:mod:`.prefill_search`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ...schedule import Schedule

__all__ = ["SearchOutcome"]


@dataclass
class SearchOutcome:
    """What a local search over plans found.

    Attributes
    ----------
    schedule
        The best plan's schedule when its replayed objective is below the start's, else None.
    value
        The replayed objective (seconds) of ``schedule``, else the start's.
    start
        The best start plan's objective (seconds); infinite when no start was evaluated.
    evaluations
        Plans evaluated.
    kept
        Moves kept, by kind.
    history
        (seconds since the start, value) at each new best plan.
    """

    schedule: Schedule | None = None
    value: float = math.inf
    start: float = math.inf
    evaluations: int = 0
    kept: dict[str, int] = field(default_factory=dict)
    history: list[tuple[float, float]] = field(default_factory=list)

    def info(self) -> dict[str, object]:
        """A JSON-ready summary: values in seconds, None where no plan was evaluated."""
        return {
            "start": self.start if math.isfinite(self.start) else None,
            "value": self.value if math.isfinite(self.value) else None,
            "evaluations": self.evaluations,
            "kept": self.kept,
            "history": self.history,
            "improved": self.schedule is not None,
        }
