"""Writes remote models (`backend: "remote"`): a config.pbtxt that names the V2 servers
that run the model, and an empty version directory."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from models.config_text import DynamicBatching, model_config_text, write_config


def write_remote(
    repository: Path,
    name: str,
    endpoints: Sequence[str],
    remote_model: str = "",
    protocol: str = "grpc",
    max_batch_size: int = 0,
    dynamic_batching: DynamicBatching | None = None,
    instances: int = 4,
    parameters: Mapping[str, str] | None = None,
) -> Path:
    """Write `<repository>/<name>`: the model `remote_model` (default: `name`) served at
    `endpoints`, `instances` calls out at once."""
    settings = {"endpoints": ",".join(endpoints), "protocol": protocol}
    if remote_model:
        settings["remote_model"] = remote_model
    text = model_config_text(
        name, max_batch_size, backend="remote", dynamic_batching=dynamic_batching,
        parameters={**settings, **(parameters or {})},
    )  # fmt: skip
    text += f"instance_group [ {{ count: {instances} kind: KIND_CPU }} ]\n"
    model_dir = Path(repository) / name
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    return write_config(model_dir, text)
