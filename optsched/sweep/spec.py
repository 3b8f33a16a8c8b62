"""The sweep specification: a YAML or JSON file, validated with pydantic.

A spec names the workloads, the axes of the grid and what to run in every cell (docs/sweep.md)::

    name: conv-policies
    workloads:                       # each: {instance: NAME|PATH} or {trace: PATH, <transforms>, cost_model: P}
      - {trace: ../shared/data/traces/splitwise_conv.csv, first: 300, cost_model: llama2-7b-a100}
      - {instance: toy-4}
    cost_model: [llama2-7b-a100]     # optional axis overriding the workloads' profiles
    limits: {kv_capacity: [20000, 100000], token_budget: [2048, 4096]}
    rate_scale: [1, 2, 4]            # axis: arrival times divided by the scale
    run:
      simulate: [vllm, sarathi, vllm-ef]
      solve: [{problem: infermax, time_limit: 30}]
      bound: true

Relative paths (traces, instance files, ``.toml`` profiles) are read relative to the spec file's
folder. Every name (policy, problem, backend, profile) is checked here, before any work, so that a
typo is one error line (exit 2) and never a sweep of failed cells.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Hashable
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from .. import policies, problems
from ..api import accepted, parse_options
from ..costmodel import CostModelError, load_cost_model
from ..instance import MAX_LIMIT, MAX_RUNNING
from ..jsonio import loads_json, read_text
from ..options import OptionError
from ..result import objective_named
from ..workload import WorkloadTransforms

__all__ = [
    "LIMIT_AXES",
    "MAX_CELLS",
    "MAX_RATE_POINTS",
    "MAX_SPEC_VALUES",
    "TRANSFORM_KEYS",
    "BoundSpec",
    "CapacitySpec",
    "ReplicasSpec",
    "RunSpec",
    "SolveSpec",
    "SpecError",
    "SweepSpec",
    "WorkloadSpec",
    "load_spec",
    "parse_spec",
]

#: The engine limits that may be axes, in column order.
LIMIT_AXES = ("kv_capacity", "token_budget", "prefill_budget", "max_running")

#: Most cells of a grid (workloads x cost models x limit values x rate scales): a sweep of this
#: many cells runs for days; a larger grid is refused before any work.
MAX_CELLS = 100_000

#: Most values (scalars, lists and mappings) a spec may hold once its YAML aliases are expanded:
#: ``&a [*b, *b, ...]`` chains double the size per line, and validation walks the expanded tree.
MAX_SPEC_VALUES = 1_000_000

LimitName = Literal["kv_capacity", "token_budget", "prefill_budget", "max_running"]


#: The workload keys that are transforms (:class:`optsched.workload.WorkloadTransforms`).
TRANSFORM_KEYS = tuple(f.name for f in dataclasses.fields(WorkloadTransforms))


class SpecError(ValueError):
    """A bad sweep specification; the message names the file and the key."""


class _Strict(BaseModel):
    """Unknown keys refused; every value of its declared type (strict: no ``"false"`` for a
    boolean, no ``true`` or ``"100"`` for an integer)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class WorkloadSpec(BaseModel):
    """One workload: a shipped or JSON instance, or a trace with its transforms.

    The keys beyond ``instance``/``trace``, ``name``, ``cost_model``, ``format`` (a trace layout of
    :mod:`optsched.workload`, detected when absent), ``model`` (BurstGPT's model filter) and
    ``limits`` are workload transforms (``first``, ``window``, ``sample``, ``seed``,
    ``rate_scale``, ``clip_prompt``, ``clip_output``, ``offline``, ``slo_ttft``, ``slo_tpot``:
    :class:`optsched.workload.WorkloadTransforms`).
    """

    model_config = ConfigDict(extra="allow", frozen=True, strict=True)

    instance: str | None = None
    trace: str | None = None
    name: str | None = None
    cost_model: str | None = None
    format: str | None = None
    model: str | None = None
    limits: dict[LimitName, int | None] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _known_keys_and_one_source(self) -> WorkloadSpec:
        unknown = sorted(set(self.transforms) - set(TRANSFORM_KEYS))
        if unknown:  # named first: a misspelt 'instance' is not a missing one
            keys = ", ".join((*type(self).model_fields, *TRANSFORM_KEYS))
            raise ValueError(f"unknown key {unknown[0]!r} (a workload's keys: {keys})")
        if (self.instance is None) == (self.trace is None):
            raise ValueError("give exactly one of 'instance' and 'trace'")
        return self

    @field_validator("limits")
    @classmethod
    def _positive_limits(cls, value: dict[str, int | None]) -> dict[str, int | None]:
        for key, v in value.items():
            _check_limit(key, v)
        return value

    @property
    def transforms(self) -> dict[str, Any]:
        """The transform keys as given."""
        return dict(self.model_extra or {})

    @property
    def label(self) -> str:
        """The ``workload`` column: ``name``, else the instance name or the trace's file stem."""
        if self.name:
            return self.name
        name = Path(str(self.instance if self.instance is not None else self.trace)).name.removesuffix(".gz")
        for extension in (".json", ".jsonl", ".csv"):
            name = name.removesuffix(extension)
        return name


class SolveSpec(BaseModel):
    """A solve in every cell: ``problem``, its ``time_limit`` and formulation options."""

    model_config = ConfigDict(extra="allow", frozen=True, strict=True)

    problem: str
    time_limit: float = Field(default=30.0, gt=0, allow_inf_nan=False)
    solver: str | None = None

    @property
    def options(self) -> dict[str, Any]:
        """The ``options`` dict of the solver protocol."""
        return {"time_limit": self.time_limit, "solver": self.solver, **(self.model_extra or {})}

    def options_with(self, objective: str) -> dict[str, Any]:
        """The options a cell's solve gets: the run's ``objective`` where the problem has that
        option, then the entry's own :attr:`options` (which win)."""
        return {**accepted(self.problem, "solve", {"objective": objective}), **self.options}


class BoundSpec(_Strict):
    """Bounds in every cell: the generic ones, plus each listed problem's bounder."""

    problems: list[str] = Field(default_factory=list)
    time_limit: float = Field(default=10.0, gt=0, allow_inf_nan=False)

    @field_validator("time_limit")
    @classmethod
    def _for_bounders(cls, value: float, info: ValidationInfo) -> float:
        if not info.data.get("problems"):
            raise ValueError(
                "the time limit of the bounders of run.bound.problems, and none is listed (the generic "
                "bounds take no time limit): list problems or remove time_limit"
            )
        return value

    def options_of(self, problem: str, objective: str) -> dict[str, Any]:
        """The options a cell's bounder of ``problem`` gets: the run's ``objective`` and this
        ``time_limit``, where the problem has those options."""
        return accepted(problem, "bound", {"objective": objective, "time_limit": self.time_limit})


class RunSpec(_Strict):
    """What every cell runs."""

    simulate: list[str] = Field(default_factory=list)
    solve: list[SolveSpec] = Field(default_factory=list)
    bound: bool | BoundSpec = False
    objective: str = "makespan"

    @field_validator("objective")
    @classmethod
    def _objective(cls, value: str) -> str:
        return objective_named(value).name  # an alias gives its objective

    @field_validator("simulate", mode="before")
    @classmethod
    def _all_policies(cls, value: Any) -> Any:
        return policies.policy_names() if value == "all" else value

    @property
    def bounds(self) -> BoundSpec | None:
        """The bound settings (None when no bound is asked for)."""
        if self.bound is True:
            return BoundSpec()
        return self.bound or None


#: Most points of the capacity search's rate grid (its bisection probes about log2 of them; the
#: grid is held whole).
MAX_RATE_POINTS = 100_000


class CapacitySpec(_Strict):
    """Range and relative tolerance of the capacity search over ``rate_scale``."""

    low: float = Field(default=0.25, gt=0, allow_inf_nan=False)
    high: float = Field(default=16.0, gt=0, allow_inf_nan=False)
    tolerance: float = Field(default=0.02, gt=0, lt=1)

    @model_validator(mode="after")
    def _ordered(self) -> CapacitySpec:
        if self.high <= self.low:
            raise ValueError(f"high ({self.high}) must exceed low ({self.low})")
        points = math.log(self.high / self.low) / math.log1p(self.tolerance)
        if points > MAX_RATE_POINTS:
            raise ValueError(
                f"tolerance {self.tolerance} over [{self.low}, {self.high}] makes {points:.3g} grid points, "
                f"more than {MAX_RATE_POINTS:,}: raise the tolerance or narrow the range"
            )
        return self


class ReplicasSpec(_Strict):
    """Routers and range of the fewest-engines search (``--replicas``)."""

    routers: list[str] = Field(default_factory=lambda: ["bestfit", "jsq", "rr"])
    max_replicas: int = Field(default=64, gt=0)
    heartbeat: float = Field(default=1.0, gt=0, allow_inf_nan=False)


class SweepSpec(_Strict):
    """A whole sweep specification (see the module docstring)."""

    name: str = Field(min_length=1)
    workloads: list[WorkloadSpec] = Field(min_length=1)
    cost_model: list[str] | None = None
    limits: dict[LimitName, list[int | None]] = Field(default_factory=dict)
    rate_scale: list[float] = Field(default_factory=lambda: [1.0])
    run: RunSpec = Field(default_factory=RunSpec)
    capacity: CapacitySpec = Field(default_factory=CapacitySpec)
    replicas: ReplicasSpec = Field(default_factory=ReplicasSpec)
    retries: int = Field(default=2, ge=0, description="re-runs of a cell whose worker process died")
    base_dir: Path = Field(default=Path("."), exclude=True)
    source: str = Field(default="<spec>", exclude=True)

    @field_validator("cost_model", "rate_scale", mode="before")
    @classmethod
    def _as_list(cls, value: Any) -> Any:
        return value if value is None or isinstance(value, list) else [value]

    @field_validator("limits", mode="before")
    @classmethod
    def _limit_lists(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: v if isinstance(v, list) else [v] for k, v in value.items()}
        return value

    @field_validator("limits")
    @classmethod
    def _limit_values(cls, value: dict[str, list[int | None]]) -> dict[str, list[int | None]]:
        for key, values in value.items():
            if not values:
                raise ValueError(f"{key}: an axis needs at least one value")
            for v in values:
                _check_limit(key, v)
        return value

    @field_validator("cost_model")
    @classmethod
    def _some_profiles(cls, value: list[str] | None) -> list[str] | None:
        if value == []:
            raise ValueError("an axis needs at least one value (leave cost_model out to keep the workloads' profiles)")
        return value

    @field_validator("rate_scale")
    @classmethod
    def _positive_scales(cls, value: list[float]) -> list[float]:
        if not value or any(not (v > 0 and v < float("inf")) for v in value):
            raise ValueError(f"must be finite numbers > 0, got {value}")
        return value

    def resolve_path(self, path: str) -> str:
        """A path of the spec, relative to the spec file's folder."""
        p = Path(path).expanduser()
        return str(p if p.is_absolute() else self.base_dir / p)


def _most(limit: str) -> int:
    """The largest value of a limit (:data:`optsched.instance.MAX_RUNNING` or ``MAX_LIMIT``)."""
    return MAX_RUNNING if limit == "max_running" else MAX_LIMIT


#: The limits that may be ``null`` ("unlimited"): M and R_max.
_UNLIMITED_LIMITS = ("kv_capacity", "max_running")


def _check_limit(key: str, value: int | None) -> None:
    """Raise ``ValueError`` for a value that limit ``key`` cannot take."""
    unlimited = key in _UNLIMITED_LIMITS
    if (value is None and not unlimited) or (value is not None and not 1 <= value <= _most(key)):
        null = " or null" if unlimited else " (null, unlimited, is for kv_capacity and max_running only)"
        got = "null" if value is None else value
        raise ValueError(f"{key}: must be integers from 1 to {_most(key):.0e}{null}, got {got}")


#: Spellings pydantic gives the members of a union in an error's location (``run.bound.bool``).
_UNION_TAGS = frozenset({"bool", "int", "float", "str", "none", "list", "dict"})


def _is_union_tag(part: Any) -> bool:
    return isinstance(part, str) and (part in _UNION_TAGS or part[:1].isupper() or "[" in part[1:])


def _location(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in (p for p in loc if not _is_union_tag(p)):
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _check_names(spec: SweepSpec, source: str) -> None:
    """Every policy, problem, backend and profile the spec names exists."""
    known = policies.policy_names()
    for k, name in enumerate(spec.run.simulate):
        if name not in known:
            raise SpecError(f"{source}: run.simulate[{k}]: unknown policy {name!r} (known: {', '.join(known)})")
    for k, entry in enumerate(spec.run.solve):
        if entry.problem not in problems.SOLVERS:
            raise SpecError(
                f"{source}: run.solve[{k}].problem: unknown problem {entry.problem!r} "
                f"(known: {', '.join(sorted(problems.SOLVERS))})"
            )
        try:
            problems.check_backend(entry.problem, entry.solver)
        except ValueError as exc:
            raise SpecError(f"{source}: run.solve[{k}].solver: {exc}") from None
        _check_options(entry.problem, "solve", entry.options_with(spec.run.objective), f"{source}: run.solve[{k}]")
    bounds = spec.run.bounds or BoundSpec()
    for k, name in enumerate(bounds.problems):
        if name not in problems.BOUNDERS:
            raise SpecError(
                f"{source}: run.bound.problems[{k}]: unknown problem {name!r} "
                f"(known: {', '.join(sorted(problems.BOUNDERS))})"
            )
        options = bounds.options_of(name, spec.run.objective)
        _check_options(name, "bound", options, f"{source}: run.bound.problems[{k}]")
    profiles = [("cost_model", p) for p in spec.cost_model or []]
    profiles += [(f"workloads[{k}].cost_model", w.cost_model) for k, w in enumerate(spec.workloads) if w.cost_model]
    for where, name in profiles:
        try:
            load_cost_model(spec.resolve_path(name) if name.endswith(".toml") else name)
        except CostModelError as exc:
            raise SpecError(f"{source}: {where}: {exc}") from None


def _check_options(problem: str, kind: str, options: dict[str, Any], where: str) -> None:
    """Parse ``options`` with the options dataclass of ``problem``'s solver (``kind="solve"``) or
    bounder (``"bound"``), as a cell will: a wrong one is a :class:`SpecError` before any cell runs."""
    try:
        parse_options(problem, kind, options)
    except OptionError as exc:
        raise SpecError(f"{where}: {exc}") from None


def _check_repeats(spec: SweepSpec, source: str) -> None:
    """No entry of an axis or a list repeats an earlier one (it would run, or be skipped as stored,
    twice); no two workloads share a name (the ``workload`` column)."""
    bounds = spec.run.bounds
    lists: list[tuple[str, list[Any]]] = [
        ("cost_model", spec.cost_model or []),
        *((f"limits.{name}", values) for name, values in spec.limits.items()),
        ("rate_scale", spec.rate_scale),
        ("run.simulate", spec.run.simulate),
        ("run.solve", spec.run.solve),
        ("run.bound.problems", bounds.problems if bounds else []),
        ("replicas.routers", spec.replicas.routers),
    ]
    for where, values in lists:
        for k, value in enumerate(values):
            if value in values[:k]:
                first = values.index(value)
                raise SpecError(f"{source}: {where}[{k}]: repeats {where}[{first}] ({_shown(value)})")
    labels = [w.label for w in spec.workloads]
    for k, label in enumerate(labels):
        if label in labels[:k]:
            raise SpecError(
                f"{source}: workloads[{k}]: its name {label!r} (the workload column) is that of "
                f"workloads[{labels.index(label)}]; give each workload its own name"
            )


def _shown(value: Any) -> str:
    """A list entry as the spec gives it (a solve entry: its keys)."""
    if isinstance(value, BaseModel):
        return str(value.model_dump(exclude_unset=True))
    return repr(value)


def parse_spec(data: Any, source: str = "<spec>", base_dir: str | Path = ".") -> SweepSpec:
    """Validate a parsed spec object.

    Raises
    ------
    SpecError
        Naming ``source`` and the key (``workloads[1].first: ...``).
    """
    if not isinstance(data, dict):
        raise SpecError(f"{source}: the spec must be a mapping of keys (name, workloads, run, ...)")
    try:
        spec = SweepSpec.model_validate({**data, "base_dir": Path(base_dir), "source": source})
    except ValidationError as exc:
        err = max(exc.errors(), key=lambda e: len(e["loc"]))  # the most specific: a union's matching member
        message = err["msg"].removeprefix("Value error, ")
        raise SpecError(f"{source}: {_location(err['loc'])}: {message}") from None
    cells = len(spec.workloads) * len(spec.cost_model or [None]) * len(spec.rate_scale)
    for values in spec.limits.values():
        cells *= len(values)
    if cells > MAX_CELLS:
        raise SpecError(f"{source}: the grid has {cells:,} cells, more than {MAX_CELLS:,} (docs/sweep.md, Limits)")
    _check_repeats(spec, source)
    _check_names(spec, source)
    return spec


def load_spec(path: str | Path) -> SweepSpec:
    """Read a YAML (``.yaml``/``.yml``) or JSON spec file; relative paths in it are read from its folder."""
    source = str(path)
    text = read_text(path, SpecError)  # UTF-8; a bad byte is named by line and column
    if source.endswith(".json"):
        data = loads_json(text, source, SpecError)
    else:
        data = _loads_yaml(text, source)
    try:
        return parse_spec(data, source, Path(path).resolve().parent)
    except RecursionError:  # pydantic's walk of a deeply nested value
        raise SpecError(f"{source}: lists or mappings nested too deeply") from None


def _expanded_values(data: Any) -> int:
    """How many values ``data`` holds once shared (aliased) lists and mappings are expanded."""
    memo: dict[int, int] = {}

    def size(value: Any) -> int:
        if not isinstance(value, (list, dict)):
            return 1
        if id(value) not in memo:
            memo[id(value)] = 1 + sum(size(v) for v in (value.values() if isinstance(value, dict) else value))
        return memo[id(value)]

    return size(data)


#: A number in scientific notation (``5e-2``, ``1E3``, ``1.5e3``, ``.5e-2``): a float, as in YAML 1.2
#: and JSON; YAML 1.1 (PyYAML) reads it as a string unless it has a dot and a signed exponent.
_YAML12_FLOAT = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$")


def _loads_yaml(text: str, source: str) -> Any:
    """YAML ``text`` parsed safely; a duplicate key (the last would win silently), a syntax error or
    deep nesting is a :class:`SpecError` naming ``source`` and the line."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if not isinstance(key, Hashable):
                    continue  # SafeLoader refuses it with its own message
                if key in seen:
                    raise SpecError(f"{source}: duplicate key {key!r} at line {key_node.start_mark.line + 1}")
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    UniqueKeyLoader.add_implicit_resolver("tag:yaml.org,2002:float", _YAML12_FLOAT, list("-+0123456789."))
    try:
        data = yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
        if _expanded_values(data) > MAX_SPEC_VALUES:
            raise SpecError(
                f"{source}: more than {MAX_SPEC_VALUES:,} values once its aliases are expanded (docs/sweep.md, Limits)"
            )
        return data
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow (a NUL byte, a control character)
        line = text.count("\n", 0, exc.position) + 1
        bad = f"character U+{exc.character:04X}" if isinstance(exc.character, int) else "a character"
        raise SpecError(f"{source}: malformed YAML at line {line}: {bad} is not allowed") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())  # one line
        raise SpecError(f"{source}: malformed YAML{where}: {problem}") from None
    except RecursionError:  # the parser's recursion over nested flow collections
        raise SpecError(f"{source}: malformed YAML: lists or mappings nested too deeply") from None
