"""Registry of simulation policies (``optsched simulate --policy NAME``).

Each entry maps a policy name to ``"module:function"`` where the function has the signature
``simulate(instance) -> Schedule``. Modules are imported lazily.
"""

from __future__ import annotations

from collections.abc import Callable

from ..instance import Instance
from ..registry import resolve
from ..schedule import Schedule
from .config import POLICY_CONFIGS, function_name

POLICIES: dict[str, str] = {
    "hybrid-baseline": "optsched.problems.hybrid.online:simulate_baseline",
    "hybrid-baseline-global": "optsched.problems.hybrid.online:simulate_baseline_global",
    "hybrid-offline": "optsched.problems.hybrid.online:simulate_offline",
    "hybrid-online": "optsched.problems.hybrid.online:simulate_online",
    "hybrid": "optsched.problems.hybrid.online:simulate_hybrid",
    "hybrid-b": "optsched.problems.hybrid.online:simulate_hybrid_b",
}

# The baseline policies of InferMax's unified scheduler (vllm, sarathi, ... and their -ef twins).
POLICIES.update({name: f"optsched.policies.engine:{function_name(name)}" for name in POLICY_CONFIGS})


def policy_names() -> list[str]:
    """All registered policy names."""
    return sorted(POLICIES)


def simulator_for(name: str) -> Callable[[Instance], Schedule]:
    """The simulate function of policy ``name`` (KeyError naming the known ones otherwise)."""
    return resolve(POLICIES, name, "policy")
