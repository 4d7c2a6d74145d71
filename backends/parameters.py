"""Typed reads of a config's `parameters` map, with errors that name the model and key."""

from __future__ import annotations

from accel_base.proto import model_config_pb2 as mc
from backends.base import BackendUnavailable

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def string_parameter(config: mc.ModelConfig, key: str) -> str | None:
    """The parameter's string value, or None when the config does not set it."""
    if key in config.parameters:
        return config.parameters[key].string_value
    return None


def int_parameter(config: mc.ModelConfig, key: str) -> int | None:
    value = string_parameter(config, key)
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise BackendUnavailable(
            f"model '{config.name}': parameter {key} must be an integer, got '{value}'"
        ) from None


def bool_parameter(config: mc.ModelConfig, key: str, default: bool) -> bool:
    value = string_parameter(config, key)
    if value is None or value == "":
        return default
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise BackendUnavailable(
        f"model '{config.name}': parameter {key} must be true or false, got '{value}'"
    )


def choice_parameter(config: mc.ModelConfig, key: str, choices: tuple[str, ...]) -> str:
    """One of `choices` (the first is the default when the key is absent)."""
    value = string_parameter(config, key)
    if value is None or value == "":
        return choices[0]
    if value not in choices:
        raise BackendUnavailable(
            f"model '{config.name}': parameter {key} must be one of {', '.join(choices)}, "
            f"got '{value}'"
        )
    return value
