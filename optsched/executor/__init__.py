"""Execute a vLLM replay plan on a real, unmodified vLLM V1 engine (``optsched execute``).

vLLM is an optional dependency (``pip install 'optsched[vllm]'``) and is imported only inside the
functions that drive the engine; this package imports without it. See docs/executor.md.
"""

from .models import ModelError, ModelSpec, available_configs, resolve_model
from .replay_scheduler import ReplayTracker, make_replay_scheduler

__all__ = ["ModelError", "ModelSpec", "ReplayTracker", "available_configs", "make_replay_scheduler", "resolve_model"]
