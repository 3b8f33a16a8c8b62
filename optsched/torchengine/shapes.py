"""Llama-family model shapes for the PyTorch engine: from a Hugging Face ``config.json`` or a name.

Built-in names are the configs shipped with the vLLM executor (``optsched/executor/configs``:
``tiny-llama``, ``llama2-7b``, ``llama2-13b``, ``llama2-70b``, ``llama3-8b``, ``llama-65b``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = ["ModelShape", "ShapeError", "builtin_shapes", "load_shape"]


class ShapeError(ValueError):
    """A ``--model`` that names no usable Llama-family shape (the message names the field)."""


@dataclass(frozen=True)
class ModelShape:
    """What the engine builds: sizes of a Llama-family decoder."""

    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    max_positions: int
    norm_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_KEYS = {
    "hidden": "hidden_size",
    "layers": "num_hidden_layers",
    "heads": "num_attention_heads",
    "intermediate": "intermediate_size",
    "vocab": "vocab_size",
}


def _positive(config: Mapping[str, Any], key: str, where: str) -> int:
    value = config.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ShapeError(f"{where}: field {key!r}: must be a positive integer, got {value!r}")
    return value


def shape_from_config(config: Mapping[str, Any], name: str, where: str) -> ModelShape:
    """A :class:`ModelShape` from a Hugging Face Llama config (``LlamaForCausalLM``-like fields)."""
    if not isinstance(config, Mapping):
        raise ShapeError(f"{where}: a model config must be a JSON object")
    sizes = {ours: _positive(config, theirs, where) for ours, theirs in _KEYS.items()}
    kv_heads = _positive(config, "num_key_value_heads", where) if "num_key_value_heads" in config else sizes["heads"]
    if sizes["hidden"] % sizes["heads"] or sizes["heads"] % kv_heads:
        raise ShapeError(
            f"{where}: field 'num_attention_heads': must divide hidden_size and be a multiple of num_key_value_heads"
        )
    positions = config.get("max_position_embeddings", 4096)
    eps = config.get("rms_norm_eps", 1e-5)
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not eps > 0:
        raise ShapeError(f"{where}: field 'rms_norm_eps': must be a number > 0")
    return ModelShape(name=name, kv_heads=kv_heads, max_positions=int(positions), norm_eps=float(eps), **sizes)


def builtin_shapes() -> list[str]:
    """Names of the shipped configs."""
    root = resources.files("optsched.executor").joinpath("configs")
    return sorted(p.name.removesuffix(".json") for p in root.iterdir() if p.name.endswith(".json"))


def load_shape(spec: str) -> ModelShape:
    """The shape named by ``--model``: a ``config.json`` path (or a folder holding one) or a built-in name."""
    path = Path(spec)
    if path.is_dir():
        path = path / "config.json"
    if path.is_file():
        try:
            config = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ShapeError(f"{path}: cannot read a JSON config ({exc})") from None
        return shape_from_config(config, path.parent.name if path.name == "config.json" else path.stem, str(path))
    shipped = resources.files("optsched.executor").joinpath("configs", f"{spec}.json")
    if not shipped.is_file():
        raise ShapeError(
            f"--model {spec!r}: not a config file or folder, nor a built-in name "
            f"(built-in: {', '.join(builtin_shapes())})"
        )
    return shape_from_config(json.loads(shipped.read_text()), spec, f"built-in config {spec!r}")
