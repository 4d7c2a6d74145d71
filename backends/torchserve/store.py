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
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf import text_format

from accel_base.proto import model_config_pb2 as mc
from backends.torchserve import BODY, HANDLER, RESPONSE, RESPONSE_INFO, VERSIONS
from backends.torchserve.archive import (
    ArchiveError,
    Manifest,
    archive_stem,
    read_manifest,
    read_model_config,
    unpack,
)
from backends.torchserve.requirements import install_requirements

CONFIG = "config.pbtxt"
DEVICE_IDS = "torchserve_device_ids"  # a config parameter: the GPUs, as JSON ([] the CPU)


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
    install_dependencies: bool = False  # install_py_dep_per_model
    gpus: int = 0  # number_of_gpu: workers go round robin over GPUs 0..n-1 (0: the CPU)


@dataclass(frozen=True)
class Overrides:
    """What a registration (TorchServe's management API) sets over the archive's own
    model-config.yaml; None: the archive's, else the defaults."""

    batch_size: int | None = None
    max_batch_delay_ms: int | None = None
    workers: int | None = None
    handler: str | None = None
    response_timeout_s: int | None = None

    def model_wide(self) -> bool:
        """Whether it sets what only a model's first version sets."""
        return any(v is not None for v in (self.batch_size, self.max_batch_delay_ms,
                                           self.workers, self.response_timeout_s))  # fmt: skip


@dataclass(frozen=True)
class StoredModel:
    name: str
    version: str  # the archive's modelVersion ("1.0")
    directory: Path  # the model's directory (its config and version directories)
    settings: dict[str, Any]  # the archive's model-config.yaml
    workers: int  # the instances its config asks for
    number: str  # the repository's version (its directory's name)


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
    config.parameters[DEVICE_IDS].string_value = json.dumps(
        _device_ids(settings, defaults, archive)
    )
    place_workers(config, max(workers, 1))
    config.version_policy.all.SetInParent()
    if defaults.envelope:  # ts wraps the handler in it (backend.py passes it to the loader)
        config.parameters["envelope"].string_value = defaults.envelope
    # TorchServe's responseTimeout: a batch running longer means a hung worker, which is
    # killed and restarted, its requests failed (gateway/core/scheduling/execution.py).
    timeout_s = overrides.response_timeout_s
    if timeout_s is None:
        timeout_s = _whole(settings, "responseTimeout", defaults.response_timeout_s, archive)
    config.parameters["worker_run_timeout_s"].string_value = str(max(timeout_s, 1))
    return config


def _device_ids(settings: dict[str, Any], defaults: Defaults, archive: str) -> list[int]:
    """The GPUs a model's workers take turns on: model-config.yaml's deviceIds, else
    number_of_gpu's 0..n-1; none when its deviceType is cpu."""
    if str(settings.get("deviceType", "")).lower() == "cpu":
        return []
    ids = settings.get("deviceIds")
    if ids is None:
        return list(range(defaults.gpus))
    if not isinstance(ids, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids
    ):
        raise ArchiveError(f"{archive}: model-config.yaml's deviceIds must be GPU numbers >= 0")
    return ids


def place_workers(config: mc.ModelConfig, workers: int) -> None:
    """`workers` instances, round robin over the model's GPUs as TorchServe hands out
    gpu_id (worker k on deviceIds[k % n]), each GPU's share one instance group; or one
    group on the CPU."""
    ids = json.loads(config.parameters[DEVICE_IDS].string_value or "[]")
    del config.instance_group[:]
    if not ids:
        config.instance_group.add(count=workers, kind=mc.ModelInstanceGroup.KIND_CPU)
        return
    for index, gpu in enumerate(ids):
        share = len(range(index, workers, len(ids)))
        if share:
            config.instance_group.add(count=share, kind=mc.ModelInstanceGroup.KIND_GPU,
                                      gpus=[gpu])  # fmt: skip


def workers_of(config: mc.ModelConfig) -> int:
    return sum(group.count for group in config.instance_group)


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
    write_config_text(directory, text_format.MessageToString(config))


def write_config_text(directory: Path, text: str) -> None:
    staged = directory / f".{CONFIG}.new"
    staged.write_text(text)
    staged.replace(directory / CONFIG)  # a reader sees the old config or the new, whole


@dataclass(frozen=True)
class Staged:
    """An archive unpacked into the repository's staging area, not yet a model's."""

    root: Path  # its directory (MAR-INF/ inside)
    staging: Path  # what to delete once it is placed or given up
    manifest: Manifest
    settings: dict[str, Any]  # its model-config.yaml
    source: Path

    def name(self, chosen: str | None = None) -> str:
        """The model's name: `chosen`, else the manifest's, else the archive file's."""
        name = chosen or self.manifest.model_name or archive_stem(self.source)
        if not name.replace("_", "").replace("-", "").isalnum():
            raise ArchiveError(f"model name '{name}' may hold only letters, digits, - and _")
        return name

    def discard(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)


def stage_archive(source: Path, repository: Path) -> Staged:
    """Unpack `source` into a staging directory of its own under `repository` (two
    registrations of one file at once do not meet there)."""
    staging = repository / f".unpacking-{uuid.uuid4().hex}"
    try:
        root = unpack(source, staging)
        manifest = read_manifest(root)
        return Staged(root, staging, manifest, read_model_config(root, manifest), source)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def place_archive(
    staged: Staged, repository: Path, defaults: Defaults, name: str,
    overrides: Overrides | Callable[[str, str], Overrides] = Overrides(),
) -> StoredModel:  # fmt: skip
    """Make a staged archive model `name` of `repository`: a new model, or a new version of
    a model of archives. A version the model holds already is VersionTaken; nothing is
    replaced. `overrides` may depend on the model's name and version (config.properties'
    `models`); settings are the model's, so a later version may name only its handler.
    The caller holds the model's lock: this reads and writes its config."""
    version = staged.manifest.model_version
    requirements = staged.manifest.requirements_file
    if requirements and not defaults.install_dependencies:
        raise ArchiveError(
            f"its manifest names a requirementsFile ({requirements}): set "
            "install_py_dep_per_model=true in config.properties to install it into the "
            "model's own environment (never the server's), or install those packages into "
            "the server's environment and archive the model without it"
        )
    if callable(overrides):
        overrides = overrides(name, version)
    directory = repository / name
    if (directory / CONFIG).is_file():
        config = read_config(directory)
        versions = versions_of(config)
        if versions is None:
            raise ArchiveError(f"'{name}' is the name of a model that is no archive's")
        if version in versions:
            raise VersionTaken(f"Model version {version} is already registered for model {name}")
        if overrides.model_wide():
            raise ArchiveError(
                f"model {name} has its settings from its first version (batch size, batch "
                "delay, workers and response timeout are per model here): register this "
                "version without them, or scale the model"
            )
        created = False
    elif directory.exists():
        raise ArchiveError(f"'{name}' is the name of a directory in the model repository")
    else:
        config = model_config(name, staged.settings, defaults, staged.source.name, overrides)
        versions, created = {}, True
        directory.mkdir()
    try:
        number = str(max((int(n) for n in versions.values()), default=0) + 1)
        staged.root.rename(directory / number)
        if requirements:
            try:
                install_requirements(directory / number, requirements)
            except BaseException:
                shutil.rmtree(directory / number, ignore_errors=True)
                raise
        versions[version] = number
        config.parameters[VERSIONS].string_value = json.dumps(versions)
        if overrides.handler:  # this version's, over its manifest's
            handlers = json.loads(config.parameters[HANDLER].string_value or "{}")
            handlers[number] = overrides.handler
            config.parameters[HANDLER].string_value = json.dumps(handlers)
        write_config(directory, config)
    except BaseException:
        if created:  # a name no model holds stays free
            shutil.rmtree(directory, ignore_errors=True)
        raise
    workers = workers_of(config)
    return StoredModel(name, version, directory, staged.settings, workers, number)


def add_archive(
    source: Path, repository: Path, defaults: Defaults, name: str | None = None,
    overrides: Overrides | Callable[[str, str], Overrides] = Overrides(),
) -> StoredModel:  # fmt: skip
    """stage_archive and place_archive at once, for a repository no one serves yet."""
    staged = stage_archive(source, repository)
    try:
        return place_archive(staged, repository, defaults, staged.name(name), overrides)
    finally:
        staged.discard()


def forget_version(directory: Path, version: str) -> str:
    """Take TorchServe version `version` out of the model's config; its repository
    number, whose directory the caller deletes once the version no longer serves."""
    config = read_config(directory)
    versions = versions_of(config) or {}
    number = versions.pop(version)
    config.parameters[VERSIONS].string_value = json.dumps(versions)
    if HANDLER in config.parameters:
        handlers = json.loads(config.parameters[HANDLER].string_value or "{}")
        handlers.pop(number, None)
        config.parameters[HANDLER].string_value = json.dumps(handlers)
    write_config(directory, config)
    return number


def set_workers(directory: Path, workers: int) -> mc.ModelConfig:
    """Ask for `workers` instances of the model in `directory` (a reload serves them)."""
    config = read_config(directory)
    place_workers(config, workers)
    write_config(directory, config)
    return config
