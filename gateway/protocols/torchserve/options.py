"""What turns TorchServe's fronts on, and how they behave: `accel-gateway torchserve` makes
it from TorchServe's flags and config.properties, `accel-gateway serve` from its own."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from backends.torchserve.store import Defaults
from gateway.protocols.torchserve.keys import Keys
from gateway.protocols.torchserve.models import TorchServeModels


@dataclass(frozen=True)
class TorchServeOptions:
    # A front's port, or None: that front is off.
    inference_port: int | None = None
    management_port: int | None = None
    grpc_inference_port: int | None = None
    grpc_management_port: int | None = None
    # Where inference (HTTP and gRPC) and management listen; None: the side fronts' host.
    inference_host: str | None = None
    management_host: str | None = None
    # The keys clients must send (Authorization: Bearer); None: token authorization off.
    keys: Keys | None = None
    model_store: Path | None = None  # where registrations may name archives
    allowed_urls: tuple[str, ...] = ()  # regular expressions, matched whole
    model_api: bool = False  # registration and unregistration allowed
    defaults: Defaults = field(default_factory=Defaults)
    # Archives the server starts with: name -> {TorchServe version: url}.
    startup: dict[str, dict[str, str]] = field(default_factory=dict)
    default_versions: dict[str, str] = field(default_factory=dict)  # config.properties'

    def ports(self) -> dict[str, int]:
        named = {
            "TorchServe inference": self.inference_port,
            "TorchServe management": self.management_port,
            "TorchServe gRPC inference": self.grpc_inference_port,
            "TorchServe gRPC management": self.grpc_management_port,
        }
        return {name: port for name, port in named.items() if port is not None}

    def models(self, repository: Path, admin_token: str | None) -> TorchServeModels:
        models = TorchServeModels(
            repository=repository, model_store=self.model_store,
            allowed_urls=[re.compile(u) for u in self.allowed_urls], defaults=self.defaults,
            model_api=self.model_api, admin_token=admin_token,
        )  # fmt: skip
        models.default_versions.update(self.default_versions)
        for name, versions in self.startup.items():
            models.startup.add(name)
            for version, url in versions.items():
                models.urls[(name, version)] = url
        return models
