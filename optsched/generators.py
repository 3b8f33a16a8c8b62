"""Seeded generators for the synthetic workloads the papers use.

A workload is ``n`` requests drawn from one or more *request types*; each type is a pair of length
distributions (prompt, output). Requests are split between the types in equal shares (the first
``n mod k`` types get one more) and then shuffled, as InferMax's heterogeneous workloads are
("requests are randomly shuffled", seed001 A.3). Arrival times come from an arrival process.
Everything is drawn from one :class:`numpy.random.Generator` seeded by ``seed``, so the same call
gives the same instance on every machine.

Length distributions
    :class:`Fixed` (InferMax's homogeneous grids: N in {32, 1024}, I and O in 1..1024),
    :class:`Choice` (uniform over a set, e.g. S = {8, 16}, L = {512, 1024}) and
    :class:`ClippedNormal` (``round(N(mean, sd))`` clipped to ``[low, high]``; e.g. the GSM8K-like
    set of the Hybrid paper, seed003, and the SLO-aware paper's sampler, seed000 D-recommendations).
Arrival processes
    :class:`AllAtZero` (offline) and :class:`Poisson` (exponential inter-arrival times of mean
    ``1 / rate`` seconds, the first arrival at its first gap).

:func:`shipped_instances` holds the recipes of the named instances in ``instances/``;
``instances/make_instances.py`` writes them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from .instance import MAX_TOKENS, Instance, InstanceError, Limits, as_limits, parse_instance
from .integers import parse_decimal, parse_int

__all__ = [
    "AllAtZero",
    "ArrivalProcess",
    "Choice",
    "ClippedNormal",
    "Fixed",
    "LengthDist",
    "Poisson",
    "generate",
    "gsm8k_like",
    "infermax_grid",
    "parse_arrivals",
    "parse_length",
    "shipped_instances",
]


def _check_count(value: int, what: str) -> None:
    """Refuse a token count outside ``1..MAX_TOKENS`` (``what`` names it in the message)."""
    if value < 1:
        raise ValueError(f"{what} must be >= 1, got {value}")
    if value > MAX_TOKENS:
        raise ValueError(f"{what} {value} exceeds {MAX_TOKENS:,} tokens, the most a request may have")


class LengthDist(Protocol):
    """A distribution of token counts (integers from 1 to :data:`~optsched.instance.MAX_TOKENS`;
    ``sample`` raises ValueError for a draw it cannot keep in that range)."""

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray: ...

    def describe(self) -> str: ...


class ArrivalProcess(Protocol):
    """A process of arrival times in seconds (non-decreasing, >= 0)."""

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray: ...

    def describe(self) -> str: ...


@dataclass(frozen=True)
class Fixed:
    """Every request has ``value`` tokens."""

    value: int

    def __post_init__(self) -> None:
        _check_count(self.value, "fixed length")

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.full(n, self.value, dtype=np.int64)

    def describe(self) -> str:
        return str(self.value)


@dataclass(frozen=True)
class Choice:
    """Uniform over a set of lengths."""

    values: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.values:
            raise ValueError("choice lengths must be a non-empty set of integers >= 1")
        for value in self.values:
            _check_count(value, "choice length")

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.choice(np.asarray(self.values, dtype=np.int64), size=n)

    def describe(self) -> str:
        return "{" + ",".join(map(str, self.values)) + "}"


@dataclass(frozen=True)
class ClippedNormal:
    """``round(N(mean, sd))`` clipped to ``[low, high]``."""

    mean: float
    sd: float
    low: int = 1
    high: int | None = None

    def __post_init__(self) -> None:
        if (
            not (math.isfinite(self.mean) and math.isfinite(self.sd))
            or self.sd < 0
            or self.low < 1
            or (self.high is not None and self.high < self.low)
        ):
            raise ValueError(f"bad clipped normal {self} (finite mean, sd >= 0, 1 <= LOW <= HIGH)")
        for what, value in (("LOW", self.low), ("HIGH", self.high)):
            if value is not None:
                _check_count(value, what)
        if self.high is None and self.mean > MAX_TOKENS:
            raise ValueError(f"MEAN {self.mean:g} exceeds {MAX_TOKENS:,} tokens, the most a request may have")

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` draws; a draw above :data:`~optsched.instance.MAX_TOKENS` with no ``high`` is a ValueError."""
        raw = np.rint(rng.normal(self.mean, self.sd, size=n))
        if self.high is None and n and raw.max() > MAX_TOKENS:
            raise ValueError(
                f"a draw of {raw.max():.6g} tokens exceeds {MAX_TOKENS:,}, the most a request may have (give HIGH)"
            )
        return np.clip(raw, self.low, self.high).astype(np.int64)

    def describe(self) -> str:
        hi = "inf" if self.high is None else str(self.high)
        return f"round(N({self.mean}, {self.sd})) clipped to [{self.low}, {hi}]"


@dataclass(frozen=True)
class AllAtZero:
    """Offline: every request is available at time 0."""

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.zeros(n)

    def describe(self) -> str:
        return "all at 0"


@dataclass(frozen=True)
class Poisson:
    """Poisson arrivals of ``rate`` requests per second."""

    rate: float

    def __post_init__(self) -> None:
        if not self.rate > 0:
            raise ValueError(f"Poisson rate must be > 0, got {self.rate}")

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.cumsum(rng.exponential(1.0 / self.rate, size=n))

    def describe(self) -> str:
        return f"Poisson, {self.rate} req/s"


def generate(
    n: int,
    types: Sequence[tuple[LengthDist, LengthDist]],
    *,
    name: str,
    cost_model: str | Mapping[str, Any] = "llama2-7b-a100",
    limits: Limits | Mapping[str, int | None] | None = None,
    arrivals: ArrivalProcess = AllAtZero(),
    seed: int = 0,
    source: str = "",
) -> Instance:
    """Draw an instance of ``n`` requests from request types.

    Parameters
    ----------
    n
        Number of requests (>= 1).
    types
        One ``(prompt, output)`` pair of length distributions per request type.
    name
        Instance name.
    cost_model
        Profile name or inline cost model.
    limits
        A :class:`~optsched.instance.Limits`, or the contract's ``limits`` object (missing keys take the
        contract's defaults).
    arrivals
        Arrival process.
    seed
        Seed of the :class:`numpy.random.Generator`.
    source
        Provenance note, stored under the top-level key ``"source"`` (with the recipe appended).

    Returns
    -------
    Instance
        Validated like any loaded instance (a request that cannot fit ``kv_capacity`` raises
        :class:`~optsched.instance.InstanceError`).

    Raises
    ------
    InstanceError
        Also for a draw of more than :data:`~optsched.instance.MAX_TOKENS` tokens.
    """
    if n < 1:
        raise InstanceError(f"{name}: n must be >= 1, got {n}")
    if not types:
        raise InstanceError(f"{name}: at least one request type is needed")
    rng = np.random.default_rng(seed)
    k = len(types)
    kind = rng.permutation(np.arange(n) % k)
    prompt = np.empty(n, dtype=np.int64)
    output = np.empty(n, dtype=np.int64)
    for t, (p_dist, o_dist) in enumerate(types):
        mask = kind == t
        cnt = int(mask.sum())
        for column, dist, label in ((prompt, p_dist, "prompt"), (output, o_dist, "output")):
            try:
                column[mask] = dist.sample(rng, cnt)
            except ValueError as exc:  # a draw beyond MAX_TOKENS
                raise InstanceError(f"{name}: request type {t}: {label} length: {exc}") from None
    arrival = arrivals.sample(rng, n)
    recipe = "; ".join(f"type {t}: I ~ {p.describe()}, O ~ {o.describe()}" for t, (p, o) in enumerate(types))
    note = f"{source + ' | ' if source else ''}generated: n={n}, {recipe}, arrivals {arrivals.describe()}, seed {seed}"
    width = len(str(n - 1))
    data = {
        "name": name,
        "source": note,
        "cost_model": cost_model,
        "limits": as_limits(limits, name).to_dict(),
        "requests": [
            {
                "id": f"r{i:0{width}d}",
                "arrival": float(arrival[i]),
                "prompt_tokens": int(prompt[i]),
                "output_tokens": int(output[i]),
            }
            for i in range(n)
        ],
    }
    return parse_instance(data, source=name)


def infermax_grid(
    n: int,
    prompt: int,
    output: int,
    *,
    kv_capacity: int = 100_000,
    token_budget: int = 4096,
    max_running: int | None = None,
    cost_model: str = "llama2-7b-a100",
    name: str | None = None,
) -> Instance:
    """InferMax's homogeneous offline workload: ``n`` requests with I = ``prompt``, O = ``output``.

    The paper's setup (seed001 section 4.1): Llama-2-7B on one A100, C = 4096, M = 100,000,
    B = n in {32, 1024}, I and O in 1..1024, all requests available at time 0.
    """
    return generate(
        n,
        [(Fixed(prompt), Fixed(output))],
        name=name or f"infermax-i{prompt}-o{output}-n{n}",
        cost_model=cost_model,
        limits={
            "token_budget": token_budget,
            "prefill_budget": token_budget,
            "kv_capacity": kv_capacity,
            "max_running": max_running,
        },
        source="InferMax (seed001) section 4.1 homogeneous grid",
    )


def gsm8k_like(
    seed: int = 0,
    *,
    n: int = 1319,
    cost_model: str = "llama-65b-ascend8",
    limits: Limits | Mapping[str, int | None] | None = None,
    arrivals: ArrivalProcess = AllAtZero(),
) -> Instance:
    """The GSM8K test set as the Hybrid paper describes it (seed003): 1319 requests, input mean
    68.43 sd 25.04, output mean 344.83 sd 187.99; both rounded and clipped to [1, 512]."""
    return generate(
        n,
        [(ClippedNormal(68.43, 25.04, 1, 512), ClippedNormal(344.83, 187.99, 1, 512))],
        name=f"gsm8k-like-{n}" if n != 1319 else "gsm8k-like",
        cost_model=cost_model,
        limits=limits,
        arrivals=arrivals,
        seed=seed,
        source="Hybrid offline-online paper (seed003) GSM8K statistics; lengths synthetic",
    )


# --------------------------------------------------------------------------- command-line specs


def parse_length(spec: str) -> LengthDist:
    """Parse a length spec: ``128`` (fixed), ``8,16`` (uniform choice) or
    ``normal:MEAN,SD[,LOW[,HIGH]]`` (rounded, clipped normal)."""
    try:
        if spec.startswith("normal:"):
            parts = spec[len("normal:") :].split(",")
            if not 2 <= len(parts) <= 4:
                raise ValueError
            bounds = [parse_int(x, signed=True) for x in parts[2:]]  # LOW and HIGH are token counts
            return ClippedNormal(parse_decimal(parts[0]), parse_decimal(parts[1]), *bounds)
        values = tuple(parse_int(x, signed=True) for x in spec.split(","))
        return Fixed(values[0]) if len(values) == 1 else Choice(values)
    except ValueError as exc:
        detail = f": {exc}" if str(exc) else ""
        raise ValueError(f"bad length spec {spec!r} (use 128, 8,16 or normal:MEAN,SD[,LOW[,HIGH]]){detail}") from None


def parse_arrivals(spec: str) -> ArrivalProcess:
    """Parse an arrival spec: ``zero`` (offline) or ``poisson:RATE`` (requests per second)."""
    if spec == "zero":
        return AllAtZero()
    if spec.startswith("poisson:"):
        try:
            return Poisson(parse_decimal(spec[len("poisson:") :]))
        except ValueError as exc:
            raise ValueError(f"bad arrival spec {spec!r}: {exc}") from None
    raise ValueError(f"bad arrival spec {spec!r} (use zero or poisson:RATE)")


# --------------------------------------------------------------------------- shipped instances

_S, _L = Choice((8, 16)), Choice((512, 1024))


def shipped_instances() -> dict[str, Instance]:
    """The recipes of the generated instances shipped in ``instances/`` (``toy-4`` is hand-made)."""
    made = [
        infermax_grid(64, 1024, 32),
        # R_max = N = 32 never binds the InferMax policies; it lets the Hybrid paper's policies
        # (J = max_running clients) run on this instance too.
        infermax_grid(32, 64, 1024, kv_capacity=10_000, max_running=32, name="infermax-i64-o1024-n32-m10k"),
        generate(
            64,
            [(_L, _L), (_S, _L)],
            name="infermax-lilo-silo-64",
            limits={"token_budget": 4096, "prefill_budget": 4096, "kv_capacity": 20_000},
            seed=0,
            source="InferMax (seed001) A.3 heterogeneous workload LILO+SILO, S={8,16}, L={512,1024}",
        ),
        generate(
            100,
            [(ClippedNormal(512, 256, 1, 2048), ClippedNormal(128, 64, 1, 512))],
            name="poisson-mixed-100",
            limits={"token_budget": 2048, "prefill_budget": 512, "kv_capacity": 20_000, "max_running": 64},
            arrivals=Poisson(5.0),
            seed=1,
            source="small online mix for tests and examples",
        ),
        gsm8k_like(seed=0),
    ]
    return {inst.name: inst for inst in made}
