"""TF Serving's ModelServerConfig messages as the models it serves: each `config` of a
`model_config_list` (`name`, `base_path`, `model_platform`, `model_version_policy`,
`version_labels`) as a TfModel, for the command line's config file and for a reload
(HandleReloadConfigRequest)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gateway.protocols.tfserving.served import TfModel, check_name


class ModelConfigError(ValueError):
    """A model config that cannot be served; the message says why."""


def _policy(config: Any) -> dict[str, Any]:
    """TF Serving's ServableVersionPolicy as Triton's version_policy (the same three)."""
    policy = config.model_version_policy
    choice = policy.WhichOneof("policy_choice")
    if choice == "all":
        return {"all": {}}
    if choice == "specific":
        if not policy.specific.versions:
            raise ModelConfigError(f"model '{config.name}': a specific policy names no version")
        return {"specific": {"versions": list(policy.specific.versions)}}
    if choice == "latest":
        return {"latest": {"num_versions": max(policy.latest.num_versions, 1)}}
    return {}  # TF Serving's default, as Triton's: the latest version


def _model(config: Any, where: Path) -> TfModel:
    try:
        name = check_name(config.name)
    except ValueError as exc:
        raise ModelConfigError(f"{where}: {exc}") from None
    if config.model_platform not in ("", "tensorflow"):
        platform = config.model_platform
        raise ModelConfigError(f"{where}: model '{name}' has model_platform '{platform}'; "
                              "only 'tensorflow' is served")  # fmt: skip
    if not config.base_path:
        raise ModelConfigError(f"{where}: model '{name}' has no base_path")
    base_path = Path(config.base_path)
    if not base_path.is_absolute():
        base_path = where.parent / base_path
    labels = dict(config.version_labels)
    return TfModel(name, base_path, _policy(config), labels)


def models_of(message: Any, where: Path) -> dict[str, TfModel]:
    """The models of a ModelServerConfig with a model_config_list; a relative base path
    is relative to `where`'s directory."""
    if message.WhichOneof("config") != "model_config_list":
        raise ModelConfigError(f"{where}: give a model_config_list (custom_model_config is "
                               "TF Serving's extension point for its own C++ code)")  # fmt: skip
    models: dict[str, TfModel] = {}
    for config in message.model_config_list.config:
        model = _model(config, where)
        if model.name in models:
            raise ModelConfigError(f"{where}: model '{model.name}' is named twice")
        models[model.name] = model
    return models
