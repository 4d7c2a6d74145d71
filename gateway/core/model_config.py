"""Model configuration: Triton's ModelConfig read from config.pbtxt or config.yaml.

Reads, checks, completes from the artifact, and renders the config as the JSON
Triton's HTTP API returns (int64 fields as numbers, every field present).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from google.protobuf import json_format, text_format

from accel_base.datatypes import config_data_type, v2_datatype
from accel_base.errors import InvalidArgument
from accel_base.proto import model_config_pb2 as mc
from backends.base import TensorSpec
from backends.registry import platform_of_artifact
from gateway.core.scheduling.sequence.controls import server_filled, state_outputs

CONFIG_FILES = ("config.pbtxt", "config.yaml", "config.yml")


class ConfigError(InvalidArgument):
    """A model's configuration is unreadable or inconsistent; the message names the field."""


def parse_config_text(text: str, source: str) -> mc.ModelConfig:
    config = mc.ModelConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    return config


def parse_config_dict(data: dict[str, Any], source: str) -> mc.ModelConfig:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected an object of ModelConfig fields")
    config = mc.ModelConfig()
    try:
        json_format.ParseDict(data, config)
    except json_format.ParseError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    return config


def read_config(model_dir: Path) -> mc.ModelConfig:
    """The model's config file, or a minimal config inferred from its artifact."""
    for filename in CONFIG_FILES:
        path = model_dir / filename
        if not path.is_file():
            continue
        text = path.read_text()
        if filename == "config.pbtxt":
            config = parse_config_text(text, str(path))
        else:
            try:
                data = yaml.safe_load(text) or {}
            except yaml.YAMLError as exc:
                raise ConfigError(f"{path}: {exc}") from None
            if not isinstance(data, dict):
                raise ConfigError(f"{path}: expected a mapping of ModelConfig fields")
            config = parse_config_dict(data, str(path))
        break
    else:
        config = mc.ModelConfig(platform=infer_platform(model_dir))
    if not config.name:
        config.name = model_dir.name
    elif config.name != model_dir.name:
        raise ConfigError(
            f"{model_dir}: config names the model '{config.name}' but its directory is "
            f"'{model_dir.name}'; they must match"
        )
    check_config(config)
    return config


def infer_platform(model_dir: Path) -> str:
    """The platform of the first artifact found in a version directory (Triton's
    auto-complete for a model with no config, or an override without a platform)."""
    for version_dir in sorted(model_dir.iterdir()):
        platform = platform_of_artifact(version_dir)  # which artifact means which: backends'
        if platform is not None:
            return platform
    raise ConfigError(
        f"{model_dir}: no config.pbtxt or config.yaml, and no artifact to infer a platform from"
    )


def platform_of(config: mc.ModelConfig) -> str:
    return config.platform or config.backend


def check_config(config: mc.ModelConfig) -> None:
    where = f"model '{config.name}'"
    if not platform_of(config):
        raise ConfigError(f"{where}: config sets neither 'platform' nor 'backend'")
    if config.max_batch_size < 0:
        raise ConfigError(f"{where}: max_batch_size must be >= 0, got {config.max_batch_size}")
    for kind, tensors in (("input", config.input), ("output", config.output)):
        seen: set[str] = set()
        for tensor in tensors:
            if not tensor.name:
                raise ConfigError(f"{where}: an {kind} has no name")
            if tensor.name in seen:
                raise ConfigError(f"{where}: {kind} '{tensor.name}' is declared twice")
            seen.add(tensor.name)
            if tensor.data_type == mc.TYPE_INVALID:
                raise ConfigError(f"{where}: {kind} '{tensor.name}' has no data_type")
            if any(dim < -1 or dim == 0 for dim in tensor.dims):
                raise ConfigError(
                    f"{where}: {kind} '{tensor.name}' dims {list(tensor.dims)} must be "
                    "positive or -1"
                )
            if tensor.HasField("reshape") and (
                _count(tensor.reshape.shape) != _count(tensor.dims) and -1 not in tensor.dims
            ):
                raise ConfigError(
                    f"{where}: {kind} '{tensor.name}' reshape {list(tensor.reshape.shape)} "
                    f"holds a different element count than dims {list(tensor.dims)}"
                )


def _count(dims) -> int:
    total = 1
    for dim in dims:
        total *= dim
    return total


def complete_config(
    config: mc.ModelConfig, inputs: list[TensorSpec], outputs: list[TensorSpec]
) -> None:
    """Fill missing inputs/outputs from the artifact; check declared ones against it."""
    batched = config.max_batch_size > 0
    for kind, declared, specs in (
        ("input", config.input, inputs),
        ("output", config.output, outputs),
    ):
        by_name = {spec.name: spec for spec in specs}
        if len(declared) == 0:
            hidden = server_filled(config) | state_outputs(config)
            for spec in specs:
                if spec.name in hidden:  # the server's to fill and keep, not a client's
                    continue
                dims = spec.shape[1:] if batched else spec.shape
                tensor = declared.add(name=spec.name, data_type=config_data_type(spec.datatype))
                tensor.dims.extend(dims)
            continue
        for tensor in declared:
            spec = by_name.get(tensor.name)
            if spec is None:
                raise ConfigError(
                    f"model '{config.name}': config declares {kind} '{tensor.name}' but the "
                    f"artifact's {kind}s are: {', '.join(by_name) or 'none'}"
                )
            if v2_datatype(tensor.data_type) != spec.datatype:
                raise ConfigError(
                    f"model '{config.name}': {kind} '{tensor.name}' is "
                    f"{mc.DataType.Name(tensor.data_type)} in the config but "
                    f"{spec.datatype} in the artifact"
                )
        if kind == "input":
            filled = server_filled(config)  # the sequence batcher's controls and state
            missing = [
                name
                for name in by_name
                if name not in {t.name for t in declared} and name not in filled
            ]
            if missing:
                raise ConfigError(
                    f"model '{config.name}': the artifact needs inputs the config does not "
                    f"declare: {', '.join(missing)}"
                )
