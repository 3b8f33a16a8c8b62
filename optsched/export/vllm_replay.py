"""Export a schedule to a *vLLM replay plan* (format ``optsched-vllm-replay``, version 1).

A replay plan tells an unmodified vLLM V1 engine, driven by :mod:`optsched.executor`, exactly what
to do in every engine step: which requests it admits, how many tokens each one processes (prefill
chunks or one decode token) and which running requests it preempts (recomputation). It also fixes
the engine limits the engine must be started with and carries the cost model's predicted step
times and the cost model's per-step arguments, so that a measured run can be compared with the
prediction and the profile refitted (``optsched validate``).

Mapping from the contract's schedule (docs/schedule.md) to engine steps
-----------------------------------------------------------------
- The schedule is replayed first (:func:`optsched.schedule.replay`); a schedule with violations is
  refused with the replay's messages (each names the batch and the request).
- Every batch with items or evictions becomes one engine step, in order. Empty batches (which only
  wait for arrivals) carry no work and are dropped; the plan keeps each step's batch index.
- ``evict`` becomes the step's ``preempt`` list: vLLM's recompute preemption frees the KV and sets
  the request's computed tokens to 0; on resume vLLM prefills prompt + generated tokens, which is
  the contract's ``I := m + 1``. The executor preempts before vLLM schedules the step.
- ``items`` become ``tokens`` {request id: count}: vLLM's ``num_scheduled_tokens`` of that step.
- A request's ``arrival_step`` is the first step whose batch starts at or after its arrival (never
  later than the first step that touches it); the executor adds it to the engine right before.

KV blocks (the rule)
--------------------
vLLM allocates KV in blocks of ``block_size`` tokens per request: a request holding ``m`` slots uses
``ceil(m / block_size)`` blocks. The engine gets ``kv_blocks = floor(M / block_size)`` usable blocks
for an instance with KV capacity ``M`` (the same memory, rounded down to whole blocks), or exactly the
plan's peak need when ``M`` is unlimited; ``--kv-blocks`` overrides this (a user who accepts giving
the engine more memory than ``M``). Export refuses a schedule whose peak block need, taken after
each step's processing (when vLLM has allocated the step's slots and before finished requests free
theirs), exceeds ``kv_blocks``, naming the step, the batch and the requests. vLLM's block pool keeps
one block as its null block, so the engine is started with ``num_gpu_blocks = kv_blocks + 1``.

Other engine limits: ``max_num_batched_tokens`` = the instance's token budget C, ``max_num_seqs`` =
the largest number of requests holding KV at once (vLLM's running list), ``max_model_len`` = the
largest prompt + output length, prefix caching off, chunked prefill on.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..costmodel import FEATURES, OPTIONAL_FEATURES, features_of
from ..instance import MAX_ARRIVAL, MAX_LIMIT, MAX_RUNNING, MAX_TOKENS, Instance
from ..jsonio import read_json, write_json_atomic
from ..schedule import ReplayResult, Schedule, replay

__all__ = [
    "FORMAT",
    "MAX_BLOCK_SIZE",
    "MAX_PLAN_BLOCKS",
    "VERSION",
    "PlanError",
    "PlanRequest",
    "PlanStep",
    "ReplayPlan",
    "build_plan",
    "load_plan",
]

FORMAT = "optsched-vllm-replay"
VERSION = 1
#: vLLM's default KV block size (tokens per block).
DEFAULT_BLOCK_SIZE = 16
#: Extra blocks vLLM's block pool reserves (its null block).
NULL_BLOCKS = 1
#: Most KV blocks a plan may give the engine or hold in a step (10^8: a hundred times an H200's
#: 7B-model cache in blocks of 16 tokens); the engine allocates per block, so a larger count is
#: refused before anything is allocated.
MAX_PLAN_BLOCKS = 10**8


class PlanError(ValueError):
    """A schedule cannot become a replay plan, or a plan file is malformed; the message says why."""


@dataclass(frozen=True)
class PlanRequest:
    """One request of the plan: lengths, arrival and the step before which it enters the engine."""

    id: str
    prompt_tokens: int
    output_tokens: int
    arrival: float
    arrival_step: int

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class PlanStep:
    """One engine step.

    Attributes
    ----------
    batch
        Index of the schedule batch it executes.
    preempt
        Requests preempted (KV freed, recompute later) before the step is scheduled.
    tokens
        ``num_scheduled_tokens`` per request id.
    predicted_time
        The cost model's batch time, seconds.
    features
        The cost model's arguments (:data:`optsched.costmodel.FEATURES`, docs/costmodel.md).
    kv_blocks
        KV blocks held after the step's processing (before finished requests release theirs).
    """

    batch: int
    preempt: tuple[str, ...]
    tokens: Mapping[str, int]
    predicted_time: float
    features: tuple[int, ...]
    kv_blocks: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "batch": self.batch,
            "preempt": list(self.preempt),
            "tokens": dict(self.tokens),
            "predicted_time": self.predicted_time,
            "features": dict(zip(FEATURES, self.features)),
            "kv_blocks": self.kv_blocks,
        }


@dataclass(frozen=True)
class ReplayPlan:
    """A versioned vLLM replay plan (see the module docstring and docs/executor.md)."""

    instance: str
    cost_model: Mapping[str, Any]
    engine: Mapping[str, Any]
    requests: tuple[PlanRequest, ...]
    steps: tuple[PlanStep, ...]
    source: Mapping[str, Any] = field(default_factory=dict)

    @property
    def predicted_total(self) -> float:
        return math.fsum(s.predicted_time for s in self.steps)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "instance": self.instance,
            "source": dict(self.source),
            "cost_model": dict(self.cost_model),
            "engine": dict(self.engine),
            "predicted_total": self.predicted_total,
            "requests": [r.to_dict() for r in self.requests],
            "steps": [s.to_dict() for s in self.steps],
        }

    def save(self, path: str | Path) -> None:
        """Write the plan JSON atomically."""
        write_json_atomic(path, self.to_dict())

    @classmethod
    def from_dict(cls, data: Any, source: str = "<plan>") -> ReplayPlan:
        """Parse a plan, checking every field of docs/executor.md before anything is allocated.

        Raises
        ------
        PlanError
            Naming the file, the request or step (its index) and the field: a wrong format or
            version, an unknown or missing field, a value of the wrong type or out of range, an
            empty request or step list, an engine flag other than the executor's, a duplicate or
            unknown request id.
        """
        if not isinstance(data, Mapping):
            raise PlanError(f"{source}: a plan must be a JSON object")
        if data.get("format") != FORMAT:
            raise PlanError(f"{source}: field 'format': expected {FORMAT!r}, got {data.get('format')!r}")
        version = data.get("version")
        if isinstance(version, bool) or version != VERSION:
            raise PlanError(f"{source}: field 'version': this optsched reads version {VERSION}, got {_shown(version)}")
        try:
            _known_keys(data, _PLAN_KEYS, "field {!r}")
            requests_data, steps_data = (_list_field(data, key) for key in ("requests", "steps"))
            steps = tuple(_read_step(j, s) for j, s in enumerate(steps_data))
            requests = tuple(_read_request(k, r, len(steps)) for k, r in enumerate(requests_data))
            engine = _read_engine(data)
            _check_total(data, steps)
            instance = data.get("instance", "")
            if not isinstance(instance, str):
                raise PlanError(f"field 'instance': must be a string, got {_shown(instance)}")
            cost_model, plan_source = (_object_field(data, key) for key in ("cost_model", "source"))
        except PlanError as exc:
            raise PlanError(f"{source}: {exc}") from None
        ids = {r.id for r in requests}
        if len(ids) != len(requests):
            twice = next(r.id for k, r in enumerate(requests) if any(q.id == r.id for q in requests[:k]))
            raise PlanError(f"{source}: field 'requests': duplicate request {twice!r}")
        for j, step in enumerate(steps):
            unknown = (set(step.tokens) | set(step.preempt)) - ids
            if unknown:
                raise PlanError(f"{source}: step {j}: unknown request(s) {sorted(unknown)}")
        return cls(instance, cost_model, engine, requests, steps, plan_source)


#: Most steps of a plan (a step index beyond it cannot index a plan that fits in memory).
MAX_PLAN_STEPS = 10**9

#: Largest KV block size of a plan, in tokens (vLLM's block tables hold block sizes up to it).
MAX_BLOCK_SIZE = 1 << 16

#: The engine fields of a plan and their largest values (docs/executor.md).
_ENGINE_RANGES = {
    "max_num_batched_tokens": MAX_LIMIT,
    "max_num_seqs": MAX_RUNNING,
    "max_model_len": 2 * MAX_TOKENS,
    "block_size": MAX_BLOCK_SIZE,
    "kv_blocks": MAX_PLAN_BLOCKS,
}

#: The engine's switches and the only value the executor runs with (it starts vLLM so).
_ENGINE_FLAGS = {"enable_prefix_caching": False, "enable_chunked_prefill": True}

#: The fields of a plan, of its requests, of its steps and of its engine.
_PLAN_KEYS = (
    "format",
    "version",
    "instance",
    "source",
    "cost_model",
    "engine",
    "predicted_total",
    "requests",
    "steps",
)
_REQUEST_KEYS = ("id", "prompt_tokens", "output_tokens", "arrival", "arrival_step")
_STEP_KEYS = ("batch", "preempt", "tokens", "predicted_time", "features", "kv_blocks")
_ENGINE_KEYS = (*_ENGINE_RANGES, "num_gpu_blocks", "kv_capacity_tokens", *_ENGINE_FLAGS)

#: Largest feature value of a step (the compiled cost model reads them as 64-bit integers).
_MAX_FEATURE = 2**63 - 1


def _shown(value: Any) -> str:
    """``value`` as JSON spells it, cut to 40 characters (for an error message)."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _known_keys(obj: Mapping[str, Any], known: tuple[str, ...], where: str) -> None:
    """A PlanError for the first key of ``obj`` outside ``known``; ``where`` is a format string
    that names a key (``"step 3: field {!r}"``)."""
    for key in obj:
        if key not in known:
            raise PlanError(f"{where.format(key)}: unknown field (known: {', '.join(known)})")


def _get(obj: Mapping[str, Any], key: str, where: str) -> Any:
    """``obj[key]``, else a PlanError saying that the field named by ``where.format(key)`` is missing."""
    if key not in obj:
        raise PlanError(f"{where.format(key)}: missing")
    return obj[key]


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    """``value`` when it is a JSON object, else a PlanError naming ``where``."""
    if not isinstance(value, Mapping):
        raise PlanError(f"{where}: must be an object, got {_shown(value)}")
    return value


def _list_field(data: Mapping[str, Any], key: str) -> list[Any]:
    """The plan's non-empty list field ``key``."""
    value = _get(data, key, "field {!r}")
    if not isinstance(value, list):
        raise PlanError(f"field {key!r}: must be a list, got {_shown(value)}")
    if not value:
        raise PlanError(f"field {key!r}: empty (a plan has at least one {key[:-1]})")
    return value


def _integer(value: Any, where: str, low: int, high: int, note: str = "") -> int:
    """A plan's integer field (a JSON integer, not a boolean, a fraction or a string, from ``low``
    to ``high``), else a PlanError naming ``where`` (and adding ``note``)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise PlanError(f"{where}: must be an integer, got {str(value)[:40]!r}")
    if not low <= value <= high:
        raise PlanError(f"{where}: must be from {low} to {high:,}{note}, got {value:,}")
    return value


def _number(value: Any, where: str, high: float) -> float:
    """A plan's number field (a JSON number, not a boolean or a string, from 0 to ``high``), else a
    PlanError naming ``where``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PlanError(f"{where}: must be a number, got {_shown(value)}")
    if not 0 <= value <= high:
        bounds = "be >= 0" if high == math.inf else f"be from 0 to {high:g}"
        raise PlanError(f"{where}: must {bounds}, got {value!r}")
    return float(value)


def _read_request(k: int, data: Any, n_steps: int) -> PlanRequest:
    """The plan's ``k``-th request; its ``arrival_step`` is one of the ``n_steps`` steps."""
    where = f"request {k}: field {{!r}}"
    r = _mapping(data, f"request {k}")
    _known_keys(r, _REQUEST_KEYS, where)
    rid = _get(r, "id", where)
    if not isinstance(rid, str) or not rid:
        raise PlanError(f"request {k}: field 'id': must be a non-empty string, got {_shown(rid)}")
    prompt, output, arrival_step = (
        _integer(_get(r, key, where), where.format(key), low, high, note)
        for key, low, high, note in (
            ("prompt_tokens", 1, MAX_TOKENS, ""),
            ("output_tokens", 1, MAX_TOKENS, ""),
            ("arrival_step", 0, n_steps - 1, f" (an index into the plan's {n_steps} steps)"),
        )
    )
    arrival = _number(_get(r, "arrival", where), where.format("arrival"), MAX_ARRIVAL)
    return PlanRequest(rid, prompt, output, arrival, arrival_step)


def _read_step(j: int, data: Any) -> PlanStep:
    """The plan's ``j``-th step."""
    where = f"step {j}: field {{!r}}"
    s = _mapping(data, f"step {j}")
    _known_keys(s, _STEP_KEYS, where)
    preempt = s.get("preempt", [])
    if not isinstance(preempt, list) or not all(isinstance(x, str) for x in preempt):
        raise PlanError(f"step {j}: field 'preempt': must be a list of request ids, got {_shown(preempt)}")
    tokens = _mapping(_get(s, "tokens", where), where.format("tokens"))
    features = _mapping(_get(s, "features", where), where.format("features"))
    _known_keys(features, FEATURES, f"step {j}: field 'features': {{!r}}")
    for name in FEATURES:
        value = (
            features.get(name, 0)
            if name in OPTIONAL_FEATURES
            else _get(features, name, f"step {j}: field 'features': {{!r}}")
        )
        _integer(value, f"step {j}: field 'features': {name!r}", 0, _MAX_FEATURE)
    return PlanStep(
        _integer(_get(s, "batch", where), where.format("batch"), 0, MAX_PLAN_STEPS),
        tuple(preempt),
        {str(k): _integer(v, f"step {j}: field 'tokens': {k!r}", 1, MAX_TOKENS) for k, v in tokens.items()},
        _number(_get(s, "predicted_time", where), where.format("predicted_time"), math.inf),
        features_of(features),
        _integer(s.get("kv_blocks", 0), where.format("kv_blocks"), 0, MAX_PLAN_BLOCKS),
    )


def _read_engine(data: Mapping[str, Any]) -> dict[str, Any]:
    """The plan's engine limits, each checked (docs/executor.md)."""
    where = "field 'engine': {!r}"
    engine = dict(_mapping(_get(data, "engine", "field {!r}"), "field 'engine'"))
    _known_keys(engine, _ENGINE_KEYS, where)
    for key, most in _ENGINE_RANGES.items():
        _integer(_get(engine, key, where), where.format(key), 1, most)
    blocks = engine["kv_blocks"] + NULL_BLOCKS
    gpu_blocks = _integer(_get(engine, "num_gpu_blocks", where), where.format("num_gpu_blocks"), 1, MAX_PLAN_BLOCKS + 1)
    if gpu_blocks != blocks:
        raise PlanError(
            f"field 'engine': 'num_gpu_blocks': must be kv_blocks + {NULL_BLOCKS} = {blocks:,}, got {gpu_blocks:,}"
        )
    if engine.get("kv_capacity_tokens") is not None:
        _integer(engine["kv_capacity_tokens"], where.format("kv_capacity_tokens"), 1, MAX_LIMIT)
    for key, value in _ENGINE_FLAGS.items():
        if engine.get(key, value) is not value:
            raise PlanError(
                f"field 'engine': {key!r}: must be {json.dumps(value)} (the executor starts vLLM so), "
                f"got {_shown(engine[key])}"
            )
    return engine


def _check_total(data: Mapping[str, Any], steps: tuple[PlanStep, ...]) -> None:
    """The plan's ``predicted_total`` is a number, and its steps' predicted times sum to a finite one."""
    if "predicted_total" in data:
        _number(data["predicted_total"], "field 'predicted_total'", math.inf)
    try:
        total = math.fsum(s.predicted_time for s in steps)
    except OverflowError:
        total = math.inf
    if not math.isfinite(total):
        raise PlanError("field 'steps': the steps' predicted_time values sum beyond the largest number")


def _object_field(data: Mapping[str, Any], key: str) -> dict[str, Any]:
    """The plan's optional object field ``key`` (empty when absent)."""
    value = data.get(key, {})
    if not isinstance(value, Mapping):
        raise PlanError(f"field {key!r}: must be an object, got {type(value).__name__}")
    return dict(value)


def load_plan(path: str | Path) -> ReplayPlan:
    """Read a plan file (:class:`PlanError` names the file and the field)."""
    return ReplayPlan.from_dict(read_json(path, PlanError), source=str(path))


def _kv_held(schedule: Schedule, n_batches: int) -> list[dict[str, int]]:
    """KV slots each request holds after each batch's processing, from a replay-clean schedule.

    For a schedule :func:`replay` accepted, a request holds the tokens of its items since its last
    eviction, up to and including its last item (the batch it finishes in); this needs no phase
    logic, only the item sums.
    """
    last_item: dict[str, int] = {}
    for j, batch in enumerate(schedule.batches):
        for it in batch.items:
            last_item[it.id] = j
    held: dict[str, int] = {}
    out: list[dict[str, int]] = []
    for j in range(n_batches):
        batch = schedule.batches[j]
        for rid in batch.evict:
            held.pop(rid, None)
        for it in batch.items:
            held[it.id] = held.get(it.id, 0) + it.tokens
        out.append(dict(held))
        for rid in [r for r in held if last_item[r] == j]:
            del held[rid]
    return out


def build_plan(
    instance: Instance,
    schedule: Schedule,
    *,
    block_size: int = DEFAULT_BLOCK_SIZE,
    kv_blocks: int | None = None,
) -> ReplayPlan:
    """Turn a schedule into a replay plan, refusing what vLLM cannot execute as written.

    Parameters
    ----------
    instance
        The instance the schedule is for.
    schedule
        The schedule; it must replay without violations.
    block_size
        vLLM KV block size in tokens.
    kv_blocks
        Usable KV blocks to give the engine; default ``floor(M / block_size)`` (the plan's peak when
        M is unlimited).

    Raises
    ------
    PlanError
        The schedule has replay violations (listed, each naming batch and request), or its KV use in
        whole blocks exceeds the engine's blocks (naming the step, batch and requests).
    """
    if not 1 <= block_size <= MAX_BLOCK_SIZE:
        raise PlanError(f"block size must be from 1 to {MAX_BLOCK_SIZE:,}, got {block_size:,}")
    res = replay(instance, schedule)
    if not res.feasible:
        shown = "; ".join(res.violations[:10])
        more = f" (and {len(res.violations) - 10} more)" if len(res.violations) > 10 else ""
        raise PlanError(f"schedule does not replay cleanly on instance {instance.name!r}: {shown}{more}")
    held = _kv_held(schedule, len(schedule.batches))
    need = [sum(math.ceil(m / block_size) for m in h.values()) for h in held]
    cap_m = instance.limits.kv_capacity
    if kv_blocks is None:
        kv_blocks = cap_m // block_size if cap_m is not None else max(need, default=1)
    kv_blocks = max(kv_blocks, 1)
    if kv_blocks > MAX_PLAN_BLOCKS:
        raise PlanError(
            f"kv_blocks: {kv_blocks:,} blocks of {block_size} tokens exceed {MAX_PLAN_BLOCKS:,}, the most a plan "
            "may give the engine; pass a smaller kv_blocks or a larger block_size"
        )

    steps, first_step, step_start = _plan_steps(schedule, res, held, need, kv_blocks, block_size, cap_m)
    requests = []
    for r in instance.requests:
        ready = next((k for k, t in enumerate(step_start) if t >= r.arrival - 1e-9 * max(1.0, r.arrival)), len(steps))
        requests.append(
            PlanRequest(r.id, r.prompt_tokens, r.output_tokens, r.arrival, min(ready, first_step.get(r.id, len(steps))))
        )
    engine = {
        "max_num_batched_tokens": max(instance.limits.token_budget, max((s.features[0] for s in steps), default=1)),
        "max_num_seqs": max(max(res.running, default=1), 1),
        "max_model_len": max(r.prompt_tokens + r.output_tokens for r in instance.requests),
        "block_size": block_size,
        "kv_blocks": kv_blocks,
        "num_gpu_blocks": kv_blocks + NULL_BLOCKS,
        "kv_capacity_tokens": cap_m,
        "enable_prefix_caching": False,
        "enable_chunked_prefill": True,
    }
    source = {
        "schedule_meta": dict(schedule.meta),
        "batches": len(schedule.batches),
        "makespan": res.metrics.makespan if res.metrics else None,
    }
    return ReplayPlan(
        instance.name,
        instance.cost_model.to_dict() | {"name": instance.cost_model.name},
        engine,
        tuple(requests),
        tuple(steps),
        source,
    )


def _plan_steps(
    schedule: Schedule,
    res: ReplayResult,
    held: list[dict[str, int]],
    need: list[int],
    kv_blocks: int,
    block_size: int,
    cap_m: int | None,
) -> tuple[list[PlanStep], dict[str, int], list[float]]:
    """One plan step per non-empty batch (with its replayed time and features), each request's first
    step and each step's start; a PlanError naming the step when its KV in whole blocks exceeds the
    engine's blocks."""
    steps: list[PlanStep] = []
    first_step: dict[str, int] = {}
    step_start: list[float] = []
    for j, batch in enumerate(schedule.batches):
        if not batch.items and not batch.evict:
            continue
        if need[j] > kv_blocks:
            top = sorted(held[j].items(), key=lambda kv: -kv[1])[:5]
            who = ", ".join(f"{rid!r}: {m} slots = {math.ceil(m / block_size)} blocks" for rid, m in top)
            why = (
                f"M = {cap_m} tokens is {kv_blocks} blocks of {block_size}"
                if cap_m is not None
                else f"the engine has {kv_blocks} blocks of {block_size}"
            )
            raise PlanError(
                f"step {len(steps)} (batch {j}): vLLM cannot execute this schedule as written: it holds "
                f"{res.kv_used[j]} KV slots, which in whole blocks of {block_size} tokens per request is "
                f"{need[j]} blocks, but {why} ({who}); use a smaller --block-size or give the engine more "
                f"memory than M with --kv-blocks"
            )
        for rid in [*batch.evict, *(it.id for it in batch.items)]:
            first_step.setdefault(rid, len(steps))
        step_start.append(res.starts[j])
        steps.append(
            PlanStep(
                batch=j,
                preempt=tuple(batch.evict),
                tokens={it.id: it.tokens for it in batch.items},
                predicted_time=res.ends[j] - res.starts[j],
                features=res.features[j],
                kv_blocks=need[j],
            )
        )
    return steps, first_step, step_start


def export(instance: Instance, schedule: Schedule, options: Mapping[str, Any]) -> dict[str, Any]:
    """Registry entry (``--format vllm-replay``): options ``block_size`` and ``kv_blocks``."""
    plan = build_plan(
        instance,
        schedule,
        block_size=int(options.get("block_size") or DEFAULT_BLOCK_SIZE),
        kv_blocks=options.get("kv_blocks"),
    )
    return plan.to_dict()
