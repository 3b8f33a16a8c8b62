"""A spec's workloads as instances: loading, workload transforms and the cells' overrides.

:func:`load_workload` reads one ``workloads`` entry once, in the driver (its trace or instance, its
own ``limits`` and transforms): the *base* instance of every cell of that workload. A cell then
derives its instance with :func:`cell_instance`: the ``cost_model`` axis, the limit axes and the
``rate_scale`` axis (arrival times divided by the scale, on top of the workload's own transforms),
validated like any loaded instance.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..costmodel import load_cost_model
from ..instance import Instance, InstanceError, as_limits, check_requests, load_instance, parse_instance
from ..workload import FORMATS, WorkloadTransforms, apply_transforms, load_trace, parse_window
from .spec import SpecError, SweepSpec, WorkloadSpec

__all__ = ["cost_model_ref", "cell_instance", "load_workload", "workload_transforms"]


def cost_model_ref(spec: SweepSpec, name: str) -> str | dict[str, Any]:
    """A profile as a cell carries it: a shipped name as it is, a ``.toml`` file as its coefficients
    (with the file's stem as name), so that a cell runs on a node that lacks the file."""
    if not name.endswith(".toml"):
        return name
    model = load_cost_model(spec.resolve_path(name))
    return {**model.to_dict(), "name": Path(name).stem}


def workload_transforms(entry: WorkloadSpec, where: str) -> WorkloadTransforms:
    """The entry's transform keys (known: :class:`~optsched.sweep.spec.WorkloadSpec` checks them)
    as :class:`WorkloadTransforms` (``window`` as ``[START, END]`` or ``"START:END"``); SpecError
    naming the key when one is out of range."""
    given = entry.transforms
    window = given.get("window")
    if isinstance(window, str):
        given["window"] = parse_window(window)
    elif isinstance(window, list):
        given["window"] = tuple(window)
    try:
        return WorkloadTransforms(**given)
    except (InstanceError, TypeError) as exc:
        raise SpecError(f"{where}: {exc}") from None


def load_workload(spec: SweepSpec, index: int) -> Instance:
    """The base instance of ``spec.workloads[index]`` (its own limits and transforms applied).

    Raises
    ------
    SpecError
        Naming the spec file and key, for a file that does not load or a transform that does not
        apply.
    """
    entry: WorkloadSpec = spec.workloads[index]
    where = f"{spec.source}: workloads[{index}]"
    try:
        transforms = workload_transforms(entry, where)
        if entry.trace is not None:
            profile = entry.cost_model or (spec.cost_model[0] if spec.cost_model else None)
            if profile is None:
                raise SpecError(f"{where}: a trace needs cost_model (here or as the top-level axis)")
            if entry.format is not None and entry.format not in FORMATS:
                raise SpecError(f"{where}.format: unknown trace format {entry.format!r} (known: {', '.join(FORMATS)})")
            options = {"model": entry.model} if entry.model is not None else {}
            base = load_trace(
                spec.resolve_path(entry.trace),
                cost_model_ref(spec, profile),
                format=entry.format,
                max_rows=transforms.first,
                check_capacity=False,
                **options,
            )
        else:
            if entry.format is not None or entry.model is not None:
                raise SpecError(f"{where}: 'format' and 'model' only apply to a trace")
            path = spec.resolve_path(entry.instance)  # type: ignore[arg-type]
            base = load_instance(path if Path(path).exists() else entry.instance, check_capacity=False)  # type: ignore[arg-type]
            if entry.cost_model is not None:
                base = cell_instance(base, cost_model_ref(spec, entry.cost_model), {}, 1.0, check_capacity=False)
        if entry.limits:
            base = cell_instance(base, None, entry.limits, 1.0, check_capacity=False)
        return apply_transforms(base, transforms)
    except InstanceError as exc:
        raise SpecError(f"{where}: {exc}") from None


def cell_instance(
    base: Instance,
    cost_model: str | Mapping[str, Any] | None,
    limits: Mapping[str, int | None],
    rate_scale: float,
    *,
    check_capacity: bool = True,
) -> Instance:
    """``base`` with a cell's overrides: profile, limits (a ``token_budget`` without a
    ``prefill_budget`` caps P at the new C, as on the command line) and arrivals divided by
    ``rate_scale`` (the workload transform). Raises :class:`InstanceError` when the result is not a valid instance
    (e.g. a request that can never fit in the cell's ``kv_capacity``).

    Without a profile override the base's requests and cost model are kept and only the limits
    are validated (the whole instance is not parsed again);
    a cell that fails there is parsed in full, so that its error is the instance parser's."""
    instance = _with_limits(base, limits, check_capacity) if cost_model is None else None
    if instance is None:
        data = base.to_dict()
        if cost_model is not None:
            data["cost_model"] = dict(cost_model) if isinstance(cost_model, Mapping) else cost_model
        else:  # the coefficients themselves: no profile file is looked up again
            data["cost_model"] = {**base.cost_model.to_dict(), "name": base.cost_model.name}
        data["limits"] = _limits_with(data["limits"], limits)
        instance = parse_instance(data, base.name, check_capacity=check_capacity)
    return instance if rate_scale == 1.0 else apply_transforms(instance, WorkloadTransforms(rate_scale=rate_scale))


def _limits_with(current: Mapping[str, int | None], overrides: Mapping[str, int | None]) -> dict[str, int | None]:
    """``current`` limits with a cell's ``overrides`` (a ``token_budget`` without a ``prefill_budget``
    caps P at the new C)."""
    new_limits = dict(current)
    budget = overrides.get("token_budget")
    if budget is not None and "prefill_budget" not in overrides:
        new_limits["prefill_budget"] = min(new_limits.get("prefill_budget") or budget, budget)
    new_limits.update(overrides)
    return new_limits


def _with_limits(base: Instance, overrides: Mapping[str, int | None], check_capacity: bool) -> Instance | None:
    """``base`` under the overridden limits, validated as the parser does; None when they are
    invalid or a request cannot fit (the caller's full parse then names the error)."""
    try:
        limits = as_limits(_limits_with(base.limits.to_dict(), overrides), base.name)
        check_requests(base.requests, limits, base.name, check_capacity, check_ids=False)
    except InstanceError:
        return None
    return dataclasses.replace(base, limits=limits)
