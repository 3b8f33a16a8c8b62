"""A planted clock for the tests of code that looks at a time budget."""

from __future__ import annotations


class ExpiresAfter:
    """A budget that expires after its first ``calls`` looks (:meth:`expired` or :meth:`holds`
    questions)."""

    def __init__(self, calls: int) -> None:
        self.calls = calls

    def expired(self) -> bool:
        self.calls -= 1
        return self.calls < 0

    def holds(self, seconds: float) -> bool:
        """Whether work of ``seconds`` fits: as long as the budget has not expired (one look)."""
        return not self.expired()
