"""TF Serving's models from its command line: one (`--model_name`, `--model_base_path`)
or a model config file (`--model_config_file`: a ModelServerConfig in protobuf text
format, a `model_config_list` of `config { name base_path model_platform
model_version_policy version_labels }`)."""

from __future__ import annotations

from pathlib import Path

from google.protobuf import text_format

from gateway.protocols.tfserving.model_configs import ModelConfigError, models_of
from gateway.protocols.tfserving.served import Batching, TfModel, check_name


class ConfigFileError(ValueError):
    """A model config file (or flags) that cannot start a server; the message says why."""


def parse_models(text: str, where: Path) -> dict[str, TfModel]:
    from accel_base.proto.tfserving.tensorflow_serving.config import model_server_config_pb2

    message = model_server_config_pb2.ModelServerConfig()
    try:
        text_format.Parse(text, message)
    except text_format.ParseError as exc:
        # (TF Serving's words: its own tests look for them)
        raise ConfigFileError(
            f"{where}: Error parsing text-format tensorflow.serving.ModelServerConfig: {exc}"
        ) from None
    try:
        return models_of(message, where)
    except ModelConfigError as exc:
        raise ConfigFileError(str(exc)) from None


def read_batching(path: Path) -> Batching:
    """A `--batching_parameters_file` (BatchingParameters in text format) as the batcher's
    bounds."""
    from accel_base.proto.tfserving.tensorflow_serving.servables.tensorflow import (
        session_bundle_config_pb2,
    )

    message = session_bundle_config_pb2.BatchingParameters()
    try:
        text_format.Parse(path.read_text(), message)
    except OSError as exc:
        raise ConfigFileError(f"--batching_parameters_file: {exc}") from None
    except text_format.ParseError as exc:
        raise ConfigFileError(f"{path}: not a BatchingParameters in text format: {exc}") from None
    defaults = Batching()
    batching = Batching(
        max_batch_size=message.max_batch_size.value if message.HasField("max_batch_size")
        else defaults.max_batch_size,
        batch_timeout_micros=message.batch_timeout_micros.value,
        max_enqueued_batches=message.max_enqueued_batches.value
        if message.HasField("max_enqueued_batches") else defaults.max_enqueued_batches,
        allowed_batch_sizes=tuple(message.allowed_batch_sizes),
    )  # fmt: skip
    sizes = batching.allowed_batch_sizes
    if sizes and (list(sizes) != sorted(set(sizes)) or sizes[-1] != batching.max_batch_size):
        raise ConfigFileError(f"{path}: allowed_batch_sizes must increase and end with "
                              f"max_batch_size ({batching.max_batch_size})")  # fmt: skip
    if batching.max_batch_size < 1:
        raise ConfigFileError(f"{path}: max_batch_size must be at least 1")
    return batching


def read_models(config_file: Path | None, name: str = "", base_path: Path | None = None
                ) -> dict[str, TfModel]:  # fmt: skip
    if config_file is None:
        assert base_path is not None
        try:
            return {name: TfModel(check_name(name), base_path.absolute())}
        except ValueError as exc:
            raise ConfigFileError(f"--model_name: {exc}") from None
    try:
        text = config_file.read_text()
    except OSError as exc:
        raise ConfigFileError(f"--model_config_file: {exc}") from None
    return parse_models(text, config_file.absolute())
