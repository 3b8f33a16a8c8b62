"""Output-length prediction by prompt-length bins (seed002 Sec. 4.3; docs/aladdin.md, section 5).

Aladdin predicts a request's output length as the mean output length of historical requests with
a similar prompt: prompts are binned (equal-count bins over the history's prompt lengths) and the
prediction is the bin's conditional mean ``E[l_out | l_in in bin]`` (rounded up to an integer).
When a request is still running after its prediction, it is re-predicted as
``E[l_out | l_in in bin, l_out > g]`` for its current generated count ``g`` (conditioned
on the current count, and iterated when exceeded again); with no such history the re-prediction
is ``g + 1``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["BinPredictor"]


@dataclass(frozen=True)
class BinPredictor:
    """Conditional-mean predictor over prompt-length bins.

    Attributes
    ----------
    edges
        Inner bin edges over prompt lengths (``len(edges) + 1`` bins).
    outputs
        Per bin, the sorted historical output lengths.
    """

    edges: np.ndarray
    outputs: tuple[np.ndarray, ...]

    @classmethod
    def fit(cls, prompts: Sequence[int], outputs: Sequence[int], bins: int = 10) -> BinPredictor:
        """Fit on a history of ``(prompt, output)`` lengths with ``bins`` equal-count bins."""
        p = np.asarray(prompts, dtype=float)
        o = np.asarray(outputs, dtype=float)
        if p.shape != o.shape or p.ndim != 1 or len(p) == 0:
            raise ValueError("BinPredictor.fit needs two equal-length, non-empty 1-D sequences")
        edges = np.unique(np.quantile(p, np.linspace(0, 1, bins + 1)[1:-1]))
        idx = np.searchsorted(edges, p, side="right")
        per_bin = tuple(np.sort(o[idx == b]) for b in range(len(edges) + 1))
        overall = np.sort(o)
        per_bin = tuple(v if len(v) else overall for v in per_bin)
        return cls(edges, per_bin)

    def _bin(self, prompt: int) -> np.ndarray:
        return self.outputs[int(np.searchsorted(self.edges, prompt, side="right"))]

    def predict(self, prompt: int) -> int:
        """``ceil(E[l_out | bin(prompt)])`` (at least 1)."""
        return max(1, math.ceil(float(self._bin(prompt).mean()) - 1e-9))

    def repredict(self, prompt: int, generated: int) -> int:
        """``ceil(E[l_out | bin(prompt), l_out > generated])``, or ``generated + 1`` without history."""
        values = self._bin(prompt)
        tail = values[np.searchsorted(values, generated, side="right") :]
        if len(tail) == 0:
            return generated + 1
        return max(generated + 1, math.ceil(float(tail.mean()) - 1e-9))
