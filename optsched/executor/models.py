"""Models for the executor: a real model directory, or an architecture with random weights.

``--model`` accepts

- the name of a shipped architecture config (``tiny-llama``, ``llama2-7b``, ``llama2-70b``,
  ``llama-65b``; files in ``optsched/executor/configs/``),
- a path to a Hugging Face ``config.json`` (any file name), or
- a model directory.

A config alone becomes a directory holding only ``config.json``; vLLM runs it with
``load_format="dummy"`` (random weights, no download, no tokenizer: the executor feeds token ids
and starts the engine with ``skip_tokenizer_init``). A directory with ``*.safetensors`` or ``*.bin``
weights is loaded as is; a directory without weights is run with dummy weights too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = ["ModelSpec", "ModelError", "available_configs", "resolve_model"]

#: Keys of the shipped configs that are optsched's notes, not Hugging Face fields.
_NOTE_KEYS = ("optsched_note",)


class ModelError(ValueError):
    """The ``--model`` argument names nothing usable."""


@dataclass(frozen=True)
class ModelSpec:
    """What the engine loads: directory, load format, the config's vocabulary size and context."""

    path: str
    load_format: str
    vocab_size: int
    name: str
    max_positions: int | None = None

    def check_fits(self, max_model_len: int) -> None:
        """Raise :class:`ModelError` when a plan's longest request exceeds the model's context."""
        if self.max_positions is not None and max_model_len > self.max_positions:
            raise ModelError(
                f"model {self.name!r}: the plan needs max_model_len {max_model_len}, but the model's "
                f"max_position_embeddings is {self.max_positions}"
            )


def available_configs() -> list[str]:
    """Names of the shipped architecture configs."""
    root = resources.files("optsched.executor").joinpath("configs")
    return sorted(p.name[: -len(".json")] for p in root.iterdir() if p.name.endswith(".json"))


def _read_config(path: Path | Any, what: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ModelError(f"{what}: cannot read a JSON config ({exc})") from None
    if not isinstance(data, dict) or "architectures" not in data or "vocab_size" not in data:
        raise ModelError(f"{what}: not a Hugging Face model config (needs 'architectures' and 'vocab_size')")
    return data


def _positions(config: dict[str, Any]) -> int | None:
    value = config.get("max_position_embeddings")
    return int(value) if isinstance(value, int) else None


def _materialise(config: dict[str, Any], name: str, workdir: Path) -> ModelSpec:
    """Write ``config.json`` (notes stripped) into ``workdir/name`` for a dummy-weight run."""
    target = workdir / name
    target.mkdir(parents=True, exist_ok=True)
    clean = {k: v for k, v in config.items() if k not in _NOTE_KEYS}
    (target / "config.json").write_text(json.dumps(clean, indent=1, sort_keys=True) + "\n")
    return ModelSpec(str(target), "dummy", int(clean["vocab_size"]), name, _positions(clean))


def resolve_model(spec: str, workdir: str | Path) -> ModelSpec:
    """Turn ``--model`` into what the engine loads (see the module docstring).

    Parameters
    ----------
    spec
        Shipped config name, config JSON path, or model directory.
    workdir
        Where a config-only model directory is written.
    """
    workdir = Path(workdir)
    path = Path(spec)
    if path.is_dir():
        config = _read_config(path / "config.json", f"{spec}/config.json")
        has_weights = any(path.glob("*.safetensors")) or any(path.glob("*.bin"))
        return ModelSpec(
            str(path), "auto" if has_weights else "dummy", int(config["vocab_size"]), path.name, _positions(config)
        )
    if path.is_file():
        return _materialise(_read_config(path, spec), path.stem, workdir)
    shipped = resources.files("optsched.executor").joinpath("configs", f"{spec}.json")
    if shipped.is_file():
        return _materialise(_read_config(shipped, spec), spec, workdir)
    raise ModelError(
        f"--model {spec!r}: not a directory, a config file or a shipped config "
        f"(shipped: {', '.join(available_configs())})"
    )
