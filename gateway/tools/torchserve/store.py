"""A TorchServe archive as a model of the repository the gateway serves.

Each archive is unpacked (backends/torchserve/archive.py) into `<repository>/<name>/1/`
beside a generated `config.pbtxt`: the `torchserve` backend, the archive's batch size as
`max_batch_size` with TorchServe's `maxBatchDelay` as the batcher's window, its workers
as instances (each a worker process), and TorchServe's job queue size as the queue's
bound. The model then serves over TorchServe's APIs and over V2 alike.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf import text_format

from accel_base.proto import model_config_pb2 as mc
from backends.torchserve import BODY, MODEL_VERSION, RESPONSE, RESPONSE_INFO
from backends.torchserve.archive import (
    ArchiveError,
    archive_stem,
    read_manifest,
    read_model_config,
    unpack,
)

VERSION = "1"  # the repository's version directory of an archive


@dataclass(frozen=True)
class Defaults:
    """What config.properties (or TorchServe's defaults) give a model its archive's
    model-config.yaml leaves unset."""

    workers: int = 1  # default_workers_per_model
    batch_size: int = 1
    max_batch_delay_ms: int = 100
    job_queue_size: int = 100


@dataclass(frozen=True)
class StoredModel:
    name: str
    version: str  # the archive's modelVersion ("1.0")
    directory: Path
    settings: dict[str, Any]  # the archive's model-config.yaml


def _positive(settings: dict[str, Any], key: str, default: int, archive: str) -> int:
    value = settings.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ArchiveError(f"{archive}: model-config.yaml's {key} must be a whole number >= 0")
    return value


def model_config(
    name: str, version: str, settings: dict[str, Any], defaults: Defaults, archive: str
) -> mc.ModelConfig:
    batch = max(_positive(settings, "batchSize", defaults.batch_size, archive), 1)
    delay_ms = _positive(settings, "maxBatchDelay", defaults.max_batch_delay_ms, archive)
    workers = _positive(settings, "minWorkers", defaults.workers, archive) or 1
    config = mc.ModelConfig(name=name, backend="torchserve", max_batch_size=batch)
    config.input.add(name=BODY, data_type=mc.TYPE_STRING, dims=[1])
    config.output.add(name=RESPONSE, data_type=mc.TYPE_STRING, dims=[1])
    config.output.add(name=RESPONSE_INFO, data_type=mc.TYPE_STRING, dims=[1])
    batching = config.dynamic_batching
    batching.max_queue_delay_microseconds = delay_ms * 1000 if batch > 1 else 0
    batching.default_queue_policy.max_queue_size = defaults.job_queue_size
    config.instance_group.add(count=workers, kind=mc.ModelInstanceGroup.KIND_CPU)
    # /predictions/{model}/{version} names TorchServe's version (gateway/protocols/torchserve).
    config.parameters[MODEL_VERSION].string_value = version
    return config


def add_archive(
    source: Path, repository: Path, defaults: Defaults, name: str | None = None
) -> StoredModel:
    """Unpack `source` as model `name` (by default the manifest's model name, else the
    file's) into `repository`, replacing nothing: a model of that name is an error."""
    staging = repository / f".unpacking-{archive_stem(source)}"
    shutil.rmtree(staging, ignore_errors=True)
    root = unpack(source, staging)
    try:
        manifest = read_manifest(root)
        name = name or manifest.model_name or archive_stem(source)
        if not name.replace("_", "").replace("-", "").isalnum():
            raise ArchiveError(f"model name '{name}' may hold only letters, digits, - and _")
        directory = repository / name
        if directory.exists():
            raise ArchiveError(f"a model named '{name}' is registered already")
        settings = read_model_config(root, manifest)
        config = model_config(name, manifest.model_version, settings, defaults, source.name)
        directory.mkdir()
        root.rename(directory / VERSION)
        (directory / "config.pbtxt").write_text(text_format.MessageToString(config))
        return StoredModel(name, manifest.model_version, directory, settings)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
