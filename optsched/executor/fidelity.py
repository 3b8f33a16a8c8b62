"""How closely a policy's schedule follows another schedule of the same instance, batch by batch.

Used to compare optsched's policies with vLLM's own scheduler (:mod:`optsched.executor.native`,
docs/policies.md, "Fidelity to vLLM's scheduler"). A batch is compared as a set: the requests it
serves with their token counts, and the requests it evicts (the order of items inside a batch has
no meaning in the contract). Both schedules are replayed (:func:`optsched.schedule.replay`); the
metrics are the replay's. No vLLM import.
"""

from __future__ import annotations

import os
import subprocess
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..instance import Instance
from ..policies.config import PolicyConfig
from ..schedule import Batch, Schedule, load_schedule, replay

__all__ = [
    "Agreement",
    "ScheduleFigures",
    "agreement",
    "batch_key",
    "comparison_rows",
    "figures",
    "run_vllm_scheduler_in",
]


def batch_key(batch: Batch) -> tuple[frozenset[tuple[str, int]], frozenset[str]]:
    """A batch as a set: ``({(request, tokens)}, {evicted request})``."""
    return frozenset((it.id, it.tokens) for it in batch.items), frozenset(batch.evict)


@dataclass(frozen=True)
class ScheduleFigures:
    """A replayed schedule's size and metrics (times in seconds)."""

    batches: int
    evictions: int
    mean_latency: float
    mean_ttft: float
    makespan: float


def figures(instance: Instance, schedule: Schedule) -> ScheduleFigures:
    """Replay ``schedule`` and summarise it.

    Raises
    ------
    ValueError
        When the schedule does not replay cleanly (naming its source and the first violations).
    """
    result = replay(instance, schedule)
    if not result.feasible:
        source = schedule.meta.get("source", schedule.meta.get("policy", "schedule"))
        raise ValueError(f"{source} on {instance.name!r} does not replay: " + "; ".join(result.violations[:3]))
    m = result.metrics
    evictions = sum(len(b.evict) for b in schedule.batches)
    return ScheduleFigures(len(schedule.batches), evictions, m.mean_latency, m.mean_ttft, m.makespan)


@dataclass(frozen=True)
class Agreement:
    """Batch-by-batch agreement of a candidate schedule with a reference schedule.

    Attributes
    ----------
    identical_prefix
        Number of leading batches that are equal (:func:`batch_key`); the index of the first
        difference, or the common length when one schedule is a prefix of the other.
    positional
        Fraction of the reference's batches equal to the candidate's batch at the same index.
    matched
        Fraction of the reference's batches matched one-to-one by an equal batch anywhere in the
        candidate (multiset intersection): insensitive to a shift after a difference.
    first_difference
        The first differing pair, ``(index, reference batch, candidate batch)``, or None.
    """

    identical_prefix: int
    positional: float
    matched: float
    first_difference: tuple[int, Batch | None, Batch | None] | None


def agreement(reference: Schedule, candidate: Schedule) -> Agreement:
    """Compare ``candidate`` with ``reference`` batch by batch (see :class:`Agreement`)."""
    ref = [batch_key(b) for b in reference.batches]
    got = [batch_key(b) for b in candidate.batches]
    common = min(len(ref), len(got))
    prefix = next((k for k in range(common) if ref[k] != got[k]), common)
    same = sum(a == b for a, b in zip(ref, got))
    matched = sum((Counter(ref) & Counter(got)).values())
    first = None
    if prefix < max(len(ref), len(got)):
        rb, cb = reference.batches, candidate.batches
        first = (prefix, rb[prefix] if prefix < len(rb) else None, cb[prefix] if prefix < len(cb) else None)
    n = max(len(ref), 1)
    return Agreement(prefix, same / n, matched / n, first)


def run_vllm_scheduler_in(
    vllm_python: str,
    instance_path: str | Path,
    out_dir: str | Path,
    block_sizes: Sequence[int],
    pythonpath: str | Path | None = None,
    watermark: float = 0.0,
) -> dict[int, Schedule]:
    """Run :mod:`optsched.executor.native` with another Python (the vLLM venv's) on an instance file.

    ``pythonpath`` (a checkout's root) goes first on that Python's path, so that it runs that
    checkout's ``optsched``; ``watermark`` is vLLM's (0, its default). Returns vLLM's schedule per
    block size, each replayed cleanly there.

    Raises
    ------
    RuntimeError
        When the run fails or a schedule does not replay (the end of the run's output in the message).
    """
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(pythonpath), os.environ.get("PYTHONPATH")]))
    env.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    cmd = [vllm_python, "-m", "optsched.executor.native", str(instance_path), "--out-dir", str(out_dir)]
    cmd += ["--block-sizes", ",".join(map(str, block_sizes)), "--watermark", str(watermark)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise RuntimeError(f"vLLM's scheduler failed on {instance_path} (exit {proc.returncode}):\n{tail}")
    return {b: load_schedule(Path(out_dir) / f"vllm-scheduler-b{b}.json") for b in block_sizes}


def comparison_rows(
    instance: Instance, vllm: dict[int, Schedule], policies: Sequence[str | PolicyConfig]
) -> list[dict[str, Any]]:
    """One row per vLLM block size: vLLM's figures, then each policy's with its agreement.

    ``policies`` are registered names or :class:`~optsched.policies.config.PolicyConfig` rows. Each
    row has ``block_size``, ``schedule`` (``vLLM <version>`` or the policy's name), the
    :class:`ScheduleFigures` fields and, for the policies, ``identical_prefix``, ``positional`` and
    ``matched`` (:class:`Agreement`) against vLLM's schedule of that block size.
    """
    from ..policies import simulator_for
    from ..policies.engine import simulate

    simulated = {
        p if isinstance(p, str) else p.name: simulator_for(p)(instance) if isinstance(p, str) else simulate(instance, p)
        for p in policies
    }
    rows: list[dict[str, Any]] = []
    for block, ref in vllm.items():
        label = f"vLLM {ref.meta.get('vllm', '')}".strip()
        rows.append({"block_size": block, "schedule": label, **asdict(figures(instance, ref))})
        for p, sched in simulated.items():
            agree = agreement(ref, sched)
            rows.append({
                "block_size": block,
                "schedule": p,
                **asdict(figures(instance, sched)),
                "identical_prefix": agree.identical_prefix,
                "positional": agree.positional,
                "matched": agree.matched,
            })
    return rows
