"""What TorchServe's fronts (inference, management, gRPC) share about its models: where
archives are registered to (the gateway's model repository), where `url` may name them
from, which version of each model is its default, and when each version was loaded.

A TorchServe model is a model of the repository whose config maps TorchServe's version
names to the repository's numbers (backends/torchserve/store.py); every other model is
V2's alone, and TorchServe's APIs do not show it.
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from accel_base.errors import NotFound, Unavailable
from backends.torchserve.store import CONFIG, Defaults, read_config, versions_of
from gateway.core.interface import Core
from gateway.protocols.torchserve.replies import TsError


@dataclass
class TorchServeModels:
    repository: Path  # the gateway's model repository: archives unpack into it
    model_store: Path | None = None  # where a registration's `url` may name archives
    allowed_urls: list[re.Pattern[str]] = field(default_factory=list)  # for http(s) urls
    defaults: Defaults = field(default_factory=Defaults)
    model_api: bool = False  # registration and unregistration allowed
    admin_token: str | None = None  # the core's management token (--admin-token)
    # TorchServe's default version of a model, once set-default chose one (else the first
    # registered); the url each version came from; when each model's workers last started.
    default_versions: dict[str, str] = field(default_factory=dict)
    urls: dict[tuple[str, str], str] = field(default_factory=dict)
    started: dict[str, float] = field(default_factory=dict)
    startup: set[str] = field(default_factory=set)  # loaded with the server
    locks: dict[str, asyncio.Lock] = field(default_factory=dict)

    def lock(self, name: str) -> asyncio.Lock:
        return self.locks.setdefault(name, asyncio.Lock())

    def registered(self) -> list[str]:
        """The TorchServe models on disk, registered with workers or without, by name."""
        if not self.repository.is_dir():
            return []
        names = []
        for path in sorted(self.repository.iterdir()):
            if not path.name.startswith(".") and (path / CONFIG).is_file():
                try:
                    if versions_of(read_config(path)) is not None:
                        names.append(path.name)
                except (OSError, ValueError):
                    continue  # a V2 model's config this reader cannot parse is not ours
        return names

    def versions(self, name: str) -> dict[str, str]:
        """TorchServe's versions of `name` -> the repository's; ModelNotFound if none."""
        directory = self.repository / name
        if "/" in name or name.startswith(".") or not (directory / CONFIG).is_file():
            raise model_not_found(name)
        versions = versions_of(read_config(directory))
        if not versions:
            raise model_not_found(name)
        return versions

    def default_version(self, name: str, versions: dict[str, str]) -> str:
        chosen = self.default_versions.get(name)
        return chosen if chosen in versions else next(iter(versions))

    def url(self, name: str, version: str) -> str:
        return self.urls.get((name, version), f"{name}.mar")

    def mark_started(self, name: str) -> None:
        self.started[name] = time.time()

    def forget(self, name: str) -> None:
        """What the fronts knew of an unregistered model (its lock stays: a waiter may
        hold it still)."""
        self.default_versions.pop(name, None)
        self.started.pop(name, None)


def model_not_found(name: str) -> TsError:
    return TsError(404, f"Model not found: {name}", "ModelNotFoundException")


def version_not_found(name: str, version: str) -> TsError:
    return TsError(
        404, f"Model version: {version} does not exist for model: {name}",
        "ModelVersionNotFoundException",
    )  # fmt: skip


async def resolve(core: Core, models: TorchServeModels, name: str, version: str) -> str:
    """The repository's version of a TorchServe request for `name` (and `version`, ""
    for the default); a model with no archive keeps its own numbering."""
    try:
        config = await core.model_config(name)
    except (NotFound, Unavailable) as exc:
        if name in models.registered():  # registered with no worker (yet)
            raise TsError(
                503, f'Model "{name}" has no worker to serve inference request. Please use '
                "scale workers API to add workers.", "ServiceUnavailableException",
            ) from None  # fmt: skip
        if isinstance(exc, NotFound) or not (models.repository / name).exists():
            raise model_not_found(name) from None  # (an unregistered model: gone from disk)
        raise
    versions = versions_of(config)
    if versions is None:
        return version
    if not version:
        version = models.default_version(name, versions)
    if version not in versions:
        raise version_not_found(name, version)
    return versions[version]
