"""TorchServe archives as models of the repository the gateway serves.

Each archive is unpacked (archive.py) into a version directory of its model,
`<repository>/<name>/<n>/`, beside a generated `config.pbtxt`: the `torchserve` backend,
the archive's batch size as `max_batch_size` with TorchServe's `maxBatchDelay` as the
batcher's window, its workers as instances (each a worker process), and TorchServe's
job queue size as the queue's bound. The model then serves over TorchServe's APIs and
over V2 alike.

TorchServe names versions with strings ("1.0"); the repository numbers them. The config
parameter VERSIONS maps one to the other ({"1.0": "1", "2.0": "2"}), in the order they
were registered, and every version is served (version_policy all). A model's settings
(batch size, window, workers) are its first archive's: a Triton config is per model.
"""

from __future__ import annotations

import functools
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf import text_format

from accel_base.proto import model_config_pb2 as mc
from backends.torchserve import BODY, HANDLER, RESPONSE, RESPONSE_INFO, VERSIONS
from backends.torchserve.archive import (
    ArchiveError,
    archive_stem,
    read_manifest,
    read_model_config,
    unpack,
)

CONFIG = "config.pbtxt"


class VersionTaken(ArchiveError):
    """The model holds an archive of that version already."""


@dataclass(frozen=True)
class Defaults:
    """What config.properties (or TorchServe's defaults) give a model its archive's
    model-config.yaml leaves unset."""

    workers: int = 1  # default_workers_per_model
    batch_size: int = 1
    max_batch_delay_ms: int = 100
    job_queue_size: int = 100
    response_timeout_s: int = 120  # default_response_timeout
    envelope: str = ""  # service_envelope: json, kserve or kservev2 (ts's own envelopes)


@dataclass(frozen=True)
class Overrides:
    """What a registration (TorchServe's management API) sets over the archive's own
    model-config.yaml; None: the archive's, else the defaults."""

    batch_size: int | None = None
    max_batch_delay_ms: int | None = None
    workers: int | None = None
    handler: str | None = None
    response_timeout_s: int | None = None


@dataclass(frozen=True)
class StoredModel:
    name: str
    version: str  # the archive's modelVersion ("1.0")
    directory: Path  # the model's directory (its config and version directories)
    settings: dict[str, Any]  # the archive's model-config.yaml
    workers: int  # the instances its config asks for


def _whole(settings: dict[str, Any], key: str, default: int, archive: str) -> int:
    value = settings.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ArchiveError(f"{archive}: model-config.yaml's {key} must be a whole number >= 0")
    return value


def model_config(
    name: str, settings: dict[str, Any], defaults: Defaults, archive: str,
    overrides: Overrides = Overrides(),
) -> mc.ModelConfig:  # fmt: skip
    """The config of a model whose first archive has `settings` (its model-config.yaml)."""
    batch = overrides.batch_size or _whole(settings, "batchSize", defaults.batch_size, archive)
    delay_ms = overrides.max_batch_delay_ms
    if delay_ms is None:
        delay_ms = _whole(settings, "maxBatchDelay", defaults.max_batch_delay_ms, archive)
    workers = overrides.workers
    if workers is None:
        workers = _whole(settings, "minWorkers", defaults.workers, archive)
    config = mc.ModelConfig(name=name, backend="torchserve", max_batch_size=max(batch, 1))
    config.input.add(name=BODY, data_type=mc.TYPE_STRING, dims=[1])
    config.output.add(name=RESPONSE, data_type=mc.TYPE_STRING, dims=[1])
    config.output.add(name=RESPONSE_INFO, data_type=mc.TYPE_STRING, dims=[1])
    batching = config.dynamic_batching
    # The window also with a batch of one (it then never waits: a batch of one is full),
    # so that the config says what the archive asked for.
    batching.max_queue_delay_microseconds = delay_ms * 1000
    batching.default_queue_policy.max_queue_size = defaults.job_queue_size
    config.instance_group.add(count=max(workers, 1), kind=mc.ModelInstanceGroup.KIND_CPU)
    config.version_policy.all.SetInParent()
    if overrides.handler:
        config.parameters[HANDLER].string_value = overrides.handler
    if defaults.envelope:  # ts wraps the handler in it (backend.py passes it to the loader)
        config.parameters["envelope"].string_value = defaults.envelope
    # TorchServe's responseTimeout: a batch running longer means a hung worker, which is
    # killed and restarted, its requests failed (gateway/core/scheduling/execution.py).
    timeout_s = overrides.response_timeout_s
    if timeout_s is None:
        timeout_s = _whole(settings, "responseTimeout", defaults.response_timeout_s, archive)
    config.parameters["worker_run_timeout_s"].string_value = str(max(timeout_s, 1))
    return config


def versions_of(config: mc.ModelConfig) -> dict[str, str] | None:
    """TorchServe's version -> the repository's, in registration order; None for a model
    that is no TorchServe archive."""
    if VERSIONS not in config.parameters:
        return None
    return dict(_parsed(config.parameters[VERSIONS].string_value))


@functools.lru_cache(maxsize=1024)
def _parsed(text: str) -> tuple[tuple[str, str], ...]:
    """Read on every TorchServe request: parsed once per text (it changes only on a
    registration)."""
    return tuple(json.loads(text).items())


def read_config(directory: Path) -> mc.ModelConfig:
    return text_format.Parse((directory / CONFIG).read_text(), mc.ModelConfig())


def write_config(directory: Path, config: mc.ModelConfig) -> None:
    staged = directory / f".{CONFIG}.new"
    staged.write_text(text_format.MessageToString(config))
    staged.replace(directory / CONFIG)  # a reader sees the old config or the new, whole


def add_archive(
    source: Path, repository: Path, defaults: Defaults, name: str | None = None,
    overrides: Overrides | Callable[[str, str], Overrides] = Overrides(),
) -> StoredModel:  # fmt: skip
    """Unpack `source` as model `name` (by default the manifest's model name, else the
    file's) into `repository`: a new model, or a new version of a model of its archives.
    A version the model holds already is VersionTaken; nothing is replaced. `overrides`
    may depend on the model's name and version (config.properties' `models`)."""
    staging = repository / f".unpacking-{archive_stem(source)}"
    shutil.rmtree(staging, ignore_errors=True)
    root = unpack(source, staging)
    try:
        manifest = read_manifest(root)
        name = name or manifest.model_name or archive_stem(source)
        if not name.replace("_", "").replace("-", "").isalnum():
            raise ArchiveError(f"model name '{name}' may hold only letters, digits, - and _")
        directory = repository / name
        settings = read_model_config(root, manifest)
        if (directory / CONFIG).is_file():
            config = read_config(directory)
            versions = versions_of(config)
            if versions is None:
                raise ArchiveError(f"'{name}' is the name of a model that is no archive's")
            if manifest.model_version in versions:
                raise VersionTaken(
                    f"Model version {manifest.model_version} is already registered for model {name}"
                )
        elif directory.exists():
            raise ArchiveError(f"'{name}' is the name of a directory in the model repository")
        else:
            if callable(overrides):
                overrides = overrides(name, manifest.model_version)
            config = model_config(name, settings, defaults, source.name, overrides)
            versions = {}
            directory.mkdir()
        number = str(max((int(n) for n in versions.values()), default=0) + 1)
        root.rename(directory / number)
        versions[manifest.model_version] = number
        config.parameters[VERSIONS].string_value = json.dumps(versions)
        write_config(directory, config)
        workers = config.instance_group[0].count
        return StoredModel(name, manifest.model_version, directory, settings, workers)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def remove_version(directory: Path, version: str) -> dict[str, str]:
    """Forget TorchServe version `version` of the model in `directory` and delete its
    files; the versions left. Call it once the version no longer serves."""
    config = read_config(directory)
    versions = versions_of(config) or {}
    number = versions.pop(version)
    config.parameters[VERSIONS].string_value = json.dumps(versions)
    write_config(directory, config)
    shutil.rmtree(directory / number, ignore_errors=True)
    return versions


def set_workers(directory: Path, workers: int) -> mc.ModelConfig:
    """Ask for `workers` instances of the model in `directory` (a reload serves them)."""
    config = read_config(directory)
    config.instance_group[0].count = workers
    write_config(directory, config)
    return config
