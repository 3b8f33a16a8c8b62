"""Step times measured on a GPU: read them, fit a profile to them, and replay executed schedules.

The format (``../shared/data/gpu/h200-llama2-7b-steps.json`` is one such file) holds

- ``grid``: profiling steps, each ``{"kind", "reqs", "features", "gpu_ms", "wall_ms"}``, ``kind`` one
  of :data:`STEP_KINDS` and ``reqs`` run-length encoded as ``[[q, k, s], count]``;
- ``runs``: executed schedules by name, each ``{"instance", "schedule_meta", "passes", "steps"}``
  (``passes``, when given, the measured passes whose median each time is: an integer >= 1) with
  steps ``{"reqs", "features", "gpu_ms", "wall_ms"}`` and ``reqs`` a plain list of ``[q, k, s]``.

``features`` (optional) holds integers >= 0 under :data:`optsched.costmodel.FEATURES` names (other keys
are kept unread, a near miss of a name refused).

An item ``[q, k, s]`` is ``q`` new tokens of one request whose keys end at ``k`` (so ``k - q`` were
cached before the step), ``s = 1`` when the step samples a token for it; ``time_unit`` is ``ms``.

:func:`grid_features` turns a grid step into the cost model's features
(:data:`optsched.costmodel.FEATURES`; a ``q = 1`` item over cached keys is a decode unless the
file's ``n_dec`` / ``kv_dec`` say otherwise). :func:`schedule_of_run` rebuilds an executed run as a
contract schedule of its instance: each item goes to a request whose KV is exactly ``k - q``
(identical requests are interchangeable); an item with ``k = q`` for a request that holds KV is its
refill after an eviction, which is put right after the request's previous item (an idle request
costs nothing, and freeing its KV early never breaks a limit that the later eviction met).
:func:`compare_runs` replays every run under a profile (:func:`optsched.schedule.replay`, the one
implementation of the semantics: the features it computes must equal the file's) and compares each
step and each makespan with the measured times, and each instance's ranking of its schedules.
"""

from __future__ import annotations

import dataclasses
import difflib
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .costfit import best_tile_fit, fit_terms
from .costmodel import FEATURES, OPTIONAL_FEATURES, CostModel, features_of
from .instance import MAX_RUNNING, Instance, load_instance
from .jsonio import read_json
from .schedule import Batch, Item, Schedule, replay

__all__ = [
    "MeasuredError",
    "RANKING_MARGIN",
    "STEP_KINDS",
    "TIMINGS",
    "checked_step_measurements",
    "compare_runs",
    "fit_grid",
    "grid_errors",
    "grid_features",
    "is_step_measurements",
    "load_step_measurements",
    "schedule_of_run",
]

#: Measured times a file may carry per step (``gpu_ms``: CUDA events; ``wall_ms``: host time).
TIMINGS = ("gpu", "wall")
#: Two schedules' measured makespans must differ by more than this share for their order to count.
RANKING_MARGIN = 0.02
#: Kinds of a grid step (``optsched profile`` and ``../shared/data/gpu``): one prompt, several
#: prompts, a chunk over cached keys, decodes of one context, a prompt plus decodes, random contexts.
STEP_KINDS = ("prefill1", "prefillN", "chunkctx", "decode", "mixed", "decode-het", "mixed-het")


class MeasuredError(ValueError):
    """A step-measurement file is malformed or a run cannot be rebuilt (the message names where)."""


def is_step_measurements(data: Any) -> bool:
    """Whether a parsed JSON object is a step-measurement file (``grid`` and/or ``runs``)."""
    return isinstance(data, Mapping) and ("grid" in data or "runs" in data) and "format" not in data


def load_step_measurements(path: str | Path) -> dict[str, Any]:
    """Read a step-measurement file (:class:`MeasuredError` names the file)."""
    data = read_json(path, MeasuredError)
    if not is_step_measurements(data):
        raise MeasuredError(f"{path}: not a step-measurement file (no 'grid' or 'runs')")
    return checked_step_measurements(data, path)


def checked_step_measurements(data: dict[str, Any], path: str | Path) -> dict[str, Any]:
    """``data``, a step-measurement file's content, once its unit and the shapes of its grid and
    runs are checked (:class:`MeasuredError` naming the file and the field)."""
    if data.get("time_unit", "ms") != "ms":
        raise MeasuredError(f"{path}: field 'time_unit': only 'ms' is read, got {data.get('time_unit')!r}")
    grid, runs = data.get("grid", []), data.get("runs", {})
    if not isinstance(grid, list):
        raise MeasuredError(f"{path}: field 'grid': must be a list of steps, got {type(grid).__name__}")
    for j, step in enumerate(grid):
        _check_step(step, f"{path}: grid step {j}")
        if (kind := step.get("kind")) not in STEP_KINDS:
            raise MeasuredError(
                f"{path}: grid step {j}: field 'kind': must be one of {', '.join(STEP_KINDS)}, got {kind!r}"
            )
    if not isinstance(runs, Mapping):
        raise MeasuredError(f"{path}: field 'runs': must be an object of runs by name, got {type(runs).__name__}")
    for name, run in runs.items():
        where = f"{path}: run {name!r}"
        if not isinstance(run, Mapping):
            raise MeasuredError(f"{where}: must be an object, got {type(run).__name__}")
        instance = run.get("instance")
        if not isinstance(instance, str) or not instance or instance != Path(instance).name or instance == "..":
            raise MeasuredError(
                f"{where}: field 'instance': must be an instance file's name (no folder), got {instance!r}"
            )
        passes = run.get("passes", 1)
        if isinstance(passes, bool) or not isinstance(passes, int) or passes < 1:
            raise MeasuredError(f"{where}: field 'passes': must be an integer >= 1, got {passes!r}")
        steps = run.get("steps", [])
        if not isinstance(steps, list):
            raise MeasuredError(f"{where}: field 'steps': must be a list, got {type(steps).__name__}")
        for j, step in enumerate(steps):
            _check_step(step, f"{where}: step {j}")
    return data


def _check_step(step: Any, where: str) -> None:
    """A step (grid or run) is an object whose ``features``, when given, are an object whose
    :data:`~optsched.costmodel.FEATURES` are integers >= 0 (a near miss of one, ``n_toks``, is refused)."""
    if not isinstance(step, Mapping):
        raise MeasuredError(f"{where}: must be an object, got {type(step).__name__}")
    features = step.get("features", {})
    if not isinstance(features, Mapping):
        raise MeasuredError(f"{where}: field 'features': must be an object, got {features!r}")
    for key, value in features.items():
        if key not in FEATURES:
            if close := difflib.get_close_matches(key, FEATURES, n=1, cutoff=0.8):
                raise MeasuredError(f"{where}: field 'features.{key}': unknown feature; did you mean {close[0]!r}?")
            continue  # another annotation of the step, kept as an instance file keeps its extension keys
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise MeasuredError(f"{where}: field 'features.{key}': must be an integer >= 0, got {value!r}")


#: Range of a measured step time (milliseconds: a nanosecond to about 11.6 days); beyond it a time
#: is bad input that would overflow or underflow the fit's arithmetic.
MIN_STEP_MS, MAX_STEP_MS = 1e-6, 1e9


def _seconds(step: Mapping[str, Any], timing: str, where: str) -> float:
    key = f"{timing}_ms"
    value = step.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not MIN_STEP_MS <= value <= MAX_STEP_MS:
        raise MeasuredError(
            f"{where}: field {key!r}: must be a number of ms from {MIN_STEP_MS:g} to {MAX_STEP_MS:g}, got {value!r}"
        )
    return float(value) * 1e-3


#: Most items (requests) of one measured step, counted before the run-length encoding is expanded
#: (as many as :data:`optsched.instance.MAX_RUNNING` requests held at once).
MAX_STEP_ITEMS = MAX_RUNNING


def _whole(value: Any) -> int:
    """A JSON integer of a step file (not a boolean, a fraction or a string)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"not an integer: {str(value)[:40]!r}")
    return value


def _items(reqs: Any, encoded: bool, where: str) -> list[tuple[int, int, int]]:
    try:
        pairs = [(item, _whole(n)) for item, n in reqs] if encoded else [(r, 1) for r in reqs]
    except (TypeError, ValueError) as exc:
        raise MeasuredError(f"{where}: field 'reqs': malformed ({exc})") from None
    total = sum(n for _, n in pairs)
    if total > MAX_STEP_ITEMS or any(n < 0 for _, n in pairs):
        raise MeasuredError(
            f"{where}: field 'reqs': item counts must be >= 0 and total at most {MAX_STEP_ITEMS:,}, got {total:,}"
        )
    try:
        out = [(_whole(q), _whole(k), _whole(s)) for (q, k, s), n in pairs for _ in range(n)]
    except (TypeError, ValueError) as exc:
        raise MeasuredError(f"{where}: field 'reqs': malformed ({exc})") from None
    if not out or any(q < 1 or k < q or s not in (0, 1) for q, k, s in out):
        raise MeasuredError(f"{where}: field 'reqs': every item [q, k, s] needs 1 <= q <= k and s 0 or 1")
    return out


def grid_features(step: Mapping[str, Any], where: str = "grid step") -> tuple[int, ...]:
    """The cost model's features of one grid step (module docstring), checked against the file's."""
    items = _items(step.get("reqs"), True, where)
    given = step.get("features")
    single = [j for j, (q, k, _) in enumerate(items) if q == 1 and k > 1]
    decodes: Sequence[int] = single
    if isinstance(given, Mapping) and "n_dec" in given and len(single) != int(given["n_dec"]):
        choices = itertools.combinations(single, int(given["n_dec"]))
        decodes = next((c for c in choices if sum(items[j][1] - 1 for j in c) == int(given["kv_dec"])), None)
        if decodes is None:
            raise MeasuredError(f"{where}: no split of its items into prefill and decode matches its features")
    dec = set(decodes)
    pre = [(q, k) for j, (q, k, _) in enumerate(items) if j not in dec]
    feats = (
        sum(q for q, _, _ in items),
        sum(q for q, _ in pre),
        sum(q * q for q, _ in pre),
        len(dec),
        sum(items[j][1] - 1 for j in dec),
        sum(q * (k - q) for q, k in pre),
        max((items[j][1] - 1 for j in dec), default=0),
    )
    if isinstance(given, Mapping):
        try:
            stated = features_of(given)
        except (KeyError, TypeError, ValueError):
            raise MeasuredError(f"{where}: field 'features': malformed") from None
        optional = [k for k, name in enumerate(FEATURES) if name in OPTIONAL_FEATURES and name in given]
        if stated[:5] != feats[:5] or any(stated[k] != feats[k] for k in optional):
            raise MeasuredError(f"{where}: field 'features' {dict(given)} disagrees with its items {feats}")
    return feats


def fit_grid(
    data: Mapping[str, Any], name: str, timing: str = "gpu", loss: str = "l1", token_tile: int | str | None = "auto"
) -> Any:
    """:func:`optsched.costfit.fit_terms` over a file's grid (whole-model profile, seconds).

    ``token_tile``: ``"auto"`` (:func:`optsched.costfit.best_tile_fit`: no tile term or the tile
    of least loss), None (no tile term) or a tile in tokens."""
    grid = data.get("grid") or []
    if len(grid) < 2:
        raise MeasuredError("field 'grid': at least two steps are needed to fit")
    feats = np.array([grid_features(g, f"grid step {j}") for j, g in enumerate(grid)])
    times = np.array([_seconds(g, timing, f"grid step {j}") for j, g in enumerate(grid)])
    if token_tile == "auto":
        return best_tile_fit(feats, times, name=name, loss=loss)
    return fit_terms(feats, times, name=name, loss=loss, token_tile=token_tile)


def grid_errors(data: Mapping[str, Any], model: CostModel, timing: str = "gpu") -> dict[str, dict[str, float]]:
    """Per step kind (and ``all``): number of steps, mean and max absolute relative error in %."""
    by_kind: dict[str, list[float]] = {}
    for j, g in enumerate(data.get("grid") or []):
        where = f"grid step {j}"
        measured = _seconds(g, timing, where)
        error = 100 * abs(model.batch_time(*grid_features(g, where)) - measured) / measured
        by_kind.setdefault(g["kind"], []).append(error)
        by_kind.setdefault("all", []).append(error)
    order = sorted(by_kind, key=lambda k: (k == "all", k))  # kinds by name, ``all`` last
    return {
        k: {"steps": len(by_kind[k]), "mean_pct": float(np.mean(by_kind[k])), "max_pct": float(np.max(by_kind[k]))}
        for k in order
    }


@dataclass(frozen=True)
class _State:
    """A request while a run is rebuilt: KV held, current prompt, tokens generated, output length,
    and the step of its last item."""

    m: int
    prompt: int
    g: int
    out: int
    last: int = -1

    @property
    def done(self) -> bool:
        return self.g >= self.out


#: Most partial assignments :func:`schedule_of_run` tries before it gives up.
SEARCH_BUDGET = 200_000

#: One item's assignment: request index, tokens, whether it refills after an eviction, and the step
#: of the request's previous item (where its eviction goes).
_Assigned = tuple[int, int, bool, int]


def _options(states: Sequence[_State], used: set[int], q: int, k: int, s: int) -> list[tuple[int, bool]]:
    """Requests an item ``[q, k, s]`` may go to, best first, one per class of identical states.

    A request holding exactly ``k - q`` slots with at least ``q`` prompt tokens left (a decode:
    ``q = 1`` in decode phase), or (``k = q``) holding KV and refilling after an eviction (in decode
    the prompt becomes ``m + 1``, contract rule 2). Preferred: the item completes the prompt
    exactly when it samples (``s``), then no eviction, then the lowest index.
    """
    found = []
    for i, st in enumerate(states):
        if i in used or st.done:
            continue
        decode = st.m >= st.prompt
        if st.m == k - q and (q == 1 if decode else st.prompt - st.m >= q):
            found.append((not (decode or st.prompt - st.m == q) == bool(s), False, i))
        elif k == q and st.m > 0:
            prompt = st.m + 1 if decode else st.prompt
            if prompt >= q:
                found.append(((prompt == q) != bool(s), True, i))
    seen, out = set(), []
    for _, refill, i in sorted(found):
        st = states[i]
        key = (st.m, st.prompt, st.g, st.out, refill)
        if key not in seen:  # identical requests in identical states are interchangeable
            seen.add(key)
            out.append((i, refill))
    return out


def _apply(states: list[_State], j: int, plan: Sequence[_Assigned]) -> tuple[list[_State], tuple[int, ...]]:
    """States after step ``j`` with its items assigned as ``plan``, and the step's first five features."""
    new = list(states)
    n_pre = s_pre = n_dec = kv_dec = 0
    for i, q, refill, _ in plan:
        st = new[i]
        if refill:
            st = _State(0, st.m + 1 if st.m >= st.prompt else st.prompt, st.g, st.out, st.last)
        if st.m >= st.prompt:
            n_dec, kv_dec = n_dec + 1, kv_dec + st.m
        else:
            n_pre, s_pre = n_pre + q, s_pre + q * q
        m, g = st.m + q, st.g + (st.m + q >= st.prompt)
        new[i] = _State(0 if g >= st.out else m, st.prompt, g, st.out, j)
    return new, (n_pre + n_dec, n_pre, s_pre, n_dec, kv_dec)


def _step_plans(states: list[_State], items: Sequence[tuple[int, int, int]], j: int, stated: tuple[int, ...] | None):
    """Every assignment of step ``j``'s items (best first) whose features match ``stated``, with the
    states after it."""

    def extend(k: int, used: set[int], plan: list[_Assigned]):
        if k == len(items):
            new, feats = _apply(states, j, plan)
            if stated is None or feats == stated[:5]:
                yield tuple(plan), new
            return
        q, kk, s = items[k]
        for i, refill in _options(states, used, q, kk, s):
            yield from extend(k + 1, used | {i}, [*plan, (i, q, refill, states[i].last)])

    return extend(0, set(), [])


def schedule_of_run(
    instance: Instance, steps: Sequence[Mapping[str, Any]], name: str = "run"
) -> tuple[Schedule, list[int]]:
    """An executed run as a contract schedule of ``instance`` (module docstring).

    A depth-first search over the items' possible requests (identical states tried once, the
    file's features pruning), until every request has finished after the last step.

    Returns
    -------
    schedule, step_batches
        The schedule and, per measured step, the index of its batch (eviction-only batches cost 0
        and belong to no step).
    """
    items = [_items(step.get("reqs"), False, f"{name}: step {j}") for j, step in enumerate(steps)]
    stated = []
    for j, step in enumerate(steps):
        given = step.get("features")
        try:
            stated.append(features_of(given) if isinstance(given, Mapping) else None)
        except (KeyError, TypeError, ValueError):
            raise MeasuredError(f"{name}: step {j}: field 'features': malformed") from None
    start = [_State(0, r.prompt_tokens, 0, r.output_tokens) for r in instance.requests]
    path: list[tuple[_Assigned, ...]] = []
    stack = [_step_plans(start, items[0], 0, stated[0])] if steps else []
    budget, deepest = SEARCH_BUDGET, 0
    while stack:
        try:
            plan, new = next(stack[-1])
        except StopIteration:
            stack.pop()
            if path:
                path.pop()
            continue
        budget -= 1
        if budget < 0:
            raise MeasuredError(f"{name}: no assignment of its items to requests found within {SEARCH_BUDGET} tries")
        path.append(plan)
        deepest = max(deepest, len(path))
        if len(path) < len(steps):
            stack.append(_step_plans(new, items[len(path)], len(path), stated[len(path)]))
        elif all(st.done for st in new):
            return _batches(instance, path, name)
        else:
            path.pop()
    where = f"step {deepest}: item(s) {[list(x) for x in items[min(deepest, len(items) - 1)]]}" if steps else "no steps"
    raise MeasuredError(
        f"{name}: {where}: no request of instance {instance.name!r} can take them "
        f"(KV held, prompt left and the file's features must match)"
    )


def _batches(instance: Instance, path: Sequence[Sequence[_Assigned]], name: str) -> tuple[Schedule, list[int]]:
    """The schedule of an assignment: a refilled request is evicted right after its previous item."""
    ids = [r.id for r in instance.requests]
    evict_after: dict[int, list[str]] = {}
    for plan in path:
        for i, _, refill, last in plan:
            if refill:
                evict_after.setdefault(last, []).append(ids[i])
    batches: list[Batch] = []
    step_batch: list[int] = []
    pending = evict_after.get(-1, [])
    for j, plan in enumerate(path):
        items = tuple(Item(ids[i], q) for i, q, _, _ in plan)
        if pending and {it.id for it in items} & set(pending):
            batches.append(Batch((), tuple(pending)))
            pending = []
        step_batch.append(len(batches))
        batches.append(Batch(items, tuple(pending)))
        pending = evict_after.get(j, [])
    return Schedule(instance.name, tuple(batches), {"source": name}), step_batch


def _ranking_kept(measured: Mapping[str, float], predicted: Mapping[str, float]) -> tuple[bool, list[str]]:
    """Whether every pair whose measured makespans differ by more than :data:`RANKING_MARGIN` is
    predicted in the same order; the pairs that are not."""
    swapped = []
    for a, b in itertools.combinations(sorted(measured), 2):
        if abs(measured[a] - measured[b]) > RANKING_MARGIN * min(measured[a], measured[b]):
            if (measured[a] < measured[b]) != (predicted[a] < predicted[b]):
                swapped.append(f"{a} vs {b}")
    return not swapped, swapped


def compare_runs(
    data: Mapping[str, Any], model: CostModel, instances_dir: str | Path, timing: str = "gpu"
) -> dict[str, Any]:
    """Replay every run of a step-measurement file under ``model`` and compare with its measurements.

    Parameters
    ----------
    data
        The parsed file (:func:`load_step_measurements`).
    model
        The profile to predict with (it replaces each instance's own cost model).
    instances_dir
        Where ``<instance>.json`` of each run is.
    timing
        ``gpu`` or ``wall`` (:data:`TIMINGS`).

    Returns
    -------
    dict
        ``runs`` (per run: predicted and measured makespan in s, the sums of the step times (the
        steps run back to back; arrivals are set to 0 for the replay), signed error %, worst step
        error %),
        ``worst_run`` and its ``worst_error_pct``, ``step_mape`` over all steps (these three None
        without runs), and ``instances`` (per instance: whether the measured ranking of its runs is
        kept, and the swapped pairs).
    """
    runs: dict[str, dict[str, Any]] = {}
    step_errors: list[float] = []
    by_instance: dict[str, dict[str, tuple[float, float]]] = {}
    for name, run in (data.get("runs") or {}).items():
        inst_name = str(run["instance"])
        path = Path(instances_dir) / f"{inst_name}.json"
        try:
            base = load_instance(path)
        except Exception as exc:  # noqa: BLE001 - any unreadable instance is named with its run
            raise MeasuredError(f"run {name!r}: instance {inst_name!r}: {exc}") from None
        # the measured steps ran back to back: arrivals only gate admission, the makespan compared
        # is the sum of the step times (the executed run waited for no arrival)
        requests = tuple(dataclasses.replace(r, arrival=0.0) for r in base.requests)
        instance = Instance(base.name, model, base.limits, requests, base.extra)
        steps = run.get("steps") or []
        schedule, step_batch = schedule_of_run(instance, steps, f"run {name!r}")
        rep = replay(instance, schedule)
        if not rep.feasible:
            raise MeasuredError(f"run {name!r}: the rebuilt schedule does not replay: {rep.violations[0]}")
        errors = []
        for j, (step, b) in enumerate(zip(steps, step_batch)):
            stated = step.get("features")
            if isinstance(stated, Mapping) and features_of(stated)[:5] != rep.features[b][:5]:
                raise MeasuredError(
                    f"run {name!r}: step {j}: replayed features {rep.features[b]} differ from the file's {dict(stated)}"
                )
            measured = _seconds(step, timing, f"run {name!r}: step {j}")
            errors.append(100 * abs(rep.ends[b] - rep.starts[b] - measured) / measured)
        predicted = rep.metrics.makespan
        measured_total = math.fsum(_seconds(s, timing, f"run {name!r}") for s in steps)
        runs[name] = {
            "instance": inst_name,
            "predicted": predicted,
            "measured": measured_total,
            "error_pct": 100 * (predicted - measured_total) / measured_total,
            "worst_step_pct": max(errors),
            "steps": len(steps),
        }
        step_errors += errors
        by_instance.setdefault(inst_name, {})[name] = (measured_total, predicted)
    instances = {}
    for inst_name, members in by_instance.items():
        kept, swapped = _ranking_kept({k: v[0] for k, v in members.items()}, {k: v[1] for k, v in members.items()})
        instances[inst_name] = {
            "ranking_kept": kept,
            "swapped": swapped,
            "measured_order": sorted(members, key=lambda k: members[k][0]),
            "predicted_order": sorted(members, key=lambda k: members[k][1]),
        }
    worst = max(runs, key=lambda k: abs(runs[k]["error_pct"])) if runs else None
    return {
        "profile": model.name,
        "timing": timing,
        "runs": runs,
        "worst_run": worst,
        "worst_error_pct": runs[worst]["error_pct"] if worst is not None else None,
        "step_mape": float(np.mean(step_errors)) if step_errors else None,
        "instances": instances,
    }
