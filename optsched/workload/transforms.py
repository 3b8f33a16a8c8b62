"""Workload transforms: select, rescale and clip the requests of an instance or trace.

:func:`apply_transforms` applies the set fields of a :class:`WorkloadTransforms` in this order (each
step sees the previous step's requests):

1. ``first`` N: keep the first N requests (file order);
2. ``window`` (START, END): keep the requests arriving at START <= arrival < END (END may be
   ``inf``) and shift their arrivals by -START, so the window starts at 0;
3. ``sample`` FRACTION with ``seed`` (default 0): keep round(FRACTION * n) requests drawn uniformly
   without replacement (``numpy.random.default_rng(seed)``), in their original order;
4. ``rate_scale`` X: divide every arrival by X (X = 2 is twice the traffic);
5. ``clip_prompt`` N / ``clip_output`` N: lengths (and predicted output lengths) above N become N;
6. ``offline``: every request arrives at 0;
7. ``slo_ttft`` / ``slo_tpot`` SECONDS: the TTFT / TPOT target of every request that has none.

A step that leaves no request raises :class:`~optsched.workload.errors.WorkloadError`. The
instance's name gets a suffix per selecting or rescaling step (``-N`` for ``first``), so that a
schedule of a transformed instance does not pass for one of the original.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace

import numpy as np

from ..instance import MAX_ARRIVAL, SLO, Instance, Request
from .errors import WorkloadError

__all__ = ["MAX_SEED", "WorkloadTransforms", "apply_transforms", "parse_window"]

#: The largest seed (of ``sample`` and of the command line's ``--seed``): a signed 64-bit integer.
MAX_SEED = 2**63 - 1


@dataclass(frozen=True)
class WorkloadTransforms:
    """Workload transforms (all optional; None/False leaves the workload as it is).

    Attributes
    ----------
    first
        Keep the first N requests.
    window
        (START, END) in seconds: keep arrivals in [START, END), shifted to start at 0.
    sample
        Fraction in (0, 1] of the requests to keep, drawn with ``seed``.
    seed
        Seed of ``sample`` (default 0); an error without ``sample``.
    rate_scale
        Divide arrival times by this factor (> 0).
    clip_prompt, clip_output
        Upper limits on prompt and output lengths (>= 1).
    offline
        Every request arrives at 0.
    slo_ttft, slo_tpot
        SLO targets (seconds, > 0) given to every request that has none of that kind.
    """

    first: int | None = None
    window: tuple[float, float] | None = None
    sample: float | None = None
    seed: int | None = None
    rate_scale: float | None = None
    clip_prompt: int | None = None
    clip_output: int | None = None
    offline: bool = False
    slo_ttft: float | None = None
    slo_tpot: float | None = None

    def __post_init__(self) -> None:
        for name in ("first", "clip_prompt", "clip_output"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise WorkloadError(f"transform {name!r}: must be an integer >= 1, got {value!r}")
        for name in ("rate_scale", "slo_ttft", "slo_tpot"):
            value = getattr(self, name)
            if value is not None and not (_is_number(value) and math.isfinite(value) and value > 0):
                raise WorkloadError(f"transform {name!r}: must be a finite number > 0, got {value!r}")
        if self.sample is not None and not (_is_number(self.sample) and 0 < self.sample <= 1):
            raise WorkloadError(f"transform 'sample': must be a fraction in (0, 1], got {self.sample!r}")
        if self.seed is not None and (
            isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed <= MAX_SEED
        ):
            raise WorkloadError(f"transform 'seed': must be an integer from 0 to 2**63 - 1, got {self.seed!r}")
        if not isinstance(self.offline, bool):
            raise WorkloadError(f"transform 'offline': must be true or false, got {self.offline!r}")
        if self.seed is not None and self.sample is None:
            raise WorkloadError("transform 'seed': only applies with 'sample'")
        if self.window is not None:
            _check_window(self.window)

    @property
    def is_identity(self) -> bool:
        """True when no transform is set."""
        return all(getattr(self, f.name) in (None, False) for f in fields(self))


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_window(window: tuple[float, float]) -> None:
    if len(window) != 2 or not all(_is_number(v) for v in window):
        raise WorkloadError(f"transform 'window': must be (START, END) in seconds, got {window!r}")
    start, end = window
    if not (math.isfinite(start) and start >= 0 and end > start):
        raise WorkloadError(f"transform 'window': needs 0 <= START < END, got {start!r}:{end!r}")


def parse_window(text: str) -> tuple[float, float]:
    """``"START:END"`` (seconds; either side may be empty: 0 and infinity) as a window tuple."""
    start_text, sep, end_text = text.partition(":")
    if not sep:
        raise WorkloadError(f"--window: expected START:END in seconds, got {text!r}")
    try:
        start = float(start_text) if start_text.strip() else 0.0
        end = float(end_text) if end_text.strip() else math.inf
    except ValueError:
        raise WorkloadError(f"--window: expected START:END in seconds, got {text!r}") from None
    window = (start, end)
    _check_window(window)
    return window


def _number(x: float) -> str:
    return f"{x:g}"


Step = Callable[[Sequence[Request], WorkloadTransforms], Sequence[Request]]


def _first(reqs: Sequence[Request], t: WorkloadTransforms) -> Sequence[Request]:
    return reqs[: t.first]


def _window(reqs: Sequence[Request], t: WorkloadTransforms) -> Sequence[Request]:
    start, end = t.window  # type: ignore[misc]
    return [replace(r, arrival=r.arrival - start) for r in reqs if start <= r.arrival < end]


def _sample(reqs: Sequence[Request], t: WorkloadTransforms) -> Sequence[Request]:
    keep = round(t.sample * len(reqs))  # type: ignore[operator]
    rng = np.random.default_rng(0 if t.seed is None else t.seed)
    chosen = np.sort(rng.choice(len(reqs), size=keep, replace=False))
    return [reqs[i] for i in chosen.tolist()]


def _rate_scale(reqs: Sequence[Request], t: WorkloadTransforms) -> Sequence[Request]:
    scaled = [replace(r, arrival=r.arrival / t.rate_scale) for r in reqs]  # type: ignore[operator]
    late = next((r for r in scaled if r.arrival > MAX_ARRIVAL), None)
    if late is not None:
        raise WorkloadError(
            f"transform 'rate_scale': request {late.id!r}: arrival {late.arrival:g} s exceeds {MAX_ARRIVAL:g} s"
        )
    return scaled


def _clip(limit: int | None, value: int | None) -> int | None:
    return value if value is None or limit is None else min(value, limit)


def _clip_lengths(reqs: Sequence[Request], t: WorkloadTransforms) -> Sequence[Request]:
    out = []
    for r in reqs:
        lengths = (r.prompt_tokens, r.output_tokens, r.predicted_output_tokens)
        clipped = (_clip(t.clip_prompt, lengths[0]), _clip(t.clip_output, lengths[1]), _clip(t.clip_output, lengths[2]))
        out.append(
            r
            if clipped == lengths
            else replace(r, prompt_tokens=clipped[0], output_tokens=clipped[1], predicted_output_tokens=clipped[2])
        )
    return out


def _offline(reqs: Sequence[Request], t: WorkloadTransforms) -> Sequence[Request]:
    return [r if r.arrival == 0 else replace(r, arrival=0.0) for r in reqs]


def _default_slos(reqs: Sequence[Request], t: WorkloadTransforms) -> Sequence[Request]:
    out = []
    for r in reqs:
        slo = r.slo or SLO()
        filled = replace(
            slo,
            ttft=slo.ttft if slo.ttft is not None else t.slo_ttft,
            tpot=slo.tpot if slo.tpot is not None else t.slo_tpot,
        )
        out.append(r if filled == r.slo else replace(r, slo=filled))
    return out


#: The steps in their order: (transform field(s), step, selects requests, name suffix or None).
_STEPS: tuple[tuple[tuple[str, ...], Step, bool, Callable[[WorkloadTransforms], str] | None], ...] = (
    (("first",), _first, True, lambda t: f"-{t.first}"),
    (("window",), _window, True, lambda t: f"-window{_number(t.window[0])}-{_number(t.window[1])}"),  # type: ignore[index]
    (("sample",), _sample, True, lambda t: f"-sample{_number(t.sample)}-seed{t.seed or 0}"),  # type: ignore[arg-type]
    (("rate_scale",), _rate_scale, False, lambda t: f"-rate{_number(t.rate_scale)}"),  # type: ignore[arg-type]
    (
        ("clip_prompt", "clip_output"),
        _clip_lengths,
        False,
        lambda t: (
            (f"-clipP{t.clip_prompt}" if t.clip_prompt else "") + (f"-clipO{t.clip_output}" if t.clip_output else "")
        ),
    ),
    (("offline",), _offline, False, None),
    (("slo_ttft", "slo_tpot"), _default_slos, False, None),
)


def apply_transforms(instance: Instance, transforms: WorkloadTransforms, *, source: str | None = None) -> Instance:
    """The instance with ``transforms`` applied in the module's documented order.

    Parameters
    ----------
    instance
        The instance (or loaded trace).
    transforms
        What to apply.
    source
        File name for error messages (default: the instance's name).

    Raises
    ------
    WorkloadError
        When a step leaves no request.
    """
    if transforms.is_identity:
        return instance
    reqs: Sequence[Request] = instance.requests
    name = instance.name
    for keys, step, selects, suffix in _STEPS:
        if all(getattr(transforms, k) in (None, False) for k in keys):
            continue
        try:
            reqs = step(reqs, transforms)
        except WorkloadError as exc:
            raise WorkloadError(f"{source or instance.name}: {exc}") from None
        if selects and not reqs:
            raise WorkloadError(f"{source or instance.name}: transform {keys[0]!r} leaves no request")
        if suffix is not None:
            name += suffix(transforms)
    return instance.with_requests(reqs, name=name)
