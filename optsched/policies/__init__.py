"""Registry of simulation policies (``optsched simulate --policy NAME``).

Each entry maps a policy name to ``"module:function"`` where the function has the signature
``simulate(instance) -> Schedule``. Modules are imported lazily. The policies of the unified
scheduler are data (:data:`.config.POLICY_CONFIGS`): each maps to :data:`ENGINE`, the engine's
``simulate(instance, policy)``, and :func:`simulator_for` binds the policy's name to it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from ..instance import Instance
from ..registry import resolve
from ..schedule import Schedule
from .config import POLICY_CONFIGS, policy_config

POLICIES: dict[str, str] = {
    "hybrid-baseline": "optsched.problems.hybrid.online:simulate_baseline",
    "hybrid-baseline-global": "optsched.problems.hybrid.online:simulate_baseline_global",
    "hybrid-offline": "optsched.problems.hybrid.online:simulate_offline",
    "hybrid-online": "optsched.problems.hybrid.online:simulate_online",
    "hybrid": "optsched.problems.hybrid.online:simulate_hybrid",
    "hybrid-b": "optsched.problems.hybrid.online:simulate_hybrid_b",
}

#: The unified scheduler's ``simulate(instance, policy)``, which runs any row of POLICY_CONFIGS.
ENGINE = "optsched.policies.engine:simulate"

# The baseline policies of InferMax's unified scheduler (vllm, sarathi, ... and their -ef twins).
POLICIES.update(dict.fromkeys(POLICY_CONFIGS, ENGINE))


def policy_names() -> list[str]:
    """All registered policy names."""
    return sorted(POLICIES)


def simulator_for(name: str) -> Callable[[Instance], Schedule]:
    """The simulate function of policy ``name`` (KeyError naming the known ones otherwise)."""
    simulate = resolve(POLICIES, name, "policy")
    return partial(simulate, policy=name) if POLICIES[name] == ENGINE else simulate


def reads_slo(name: str) -> bool:
    """Whether policy ``name`` schedules by the requests' SLO targets (``slo-budget``: a row of the
    unified scheduler with ``tpot_budget`` or ``ttft_drop``, :mod:`.slo`)."""
    if POLICIES.get(name) != ENGINE:
        return False
    config = policy_config(name)
    return config.tpot_budget or config.ttft_drop


def runs_compiled(name: str) -> bool:
    """Whether policy ``name`` runs on the compiled engine (a row of the unified scheduler that
    :func:`optsched.policies.fastsim.compiles` accepts); the others run in Python, about ten
    times slower on a large trace."""
    if POLICIES.get(name) != ENGINE:
        return False
    from .fastsim import compiles  # numpy is imported only where a policy runs

    return compiles(policy_config(name))
