"""The model repository's queries (gateway/core/repository.py): which models exist, where
their files are, and which loaded version a request goes to; Triton's words in the
errors, which clients match on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from accel_base.errors import GatewayError, InvalidArgument, NotFound, Unavailable
from accel_base.proto import model_config_pb2 as mc
from gateway.core.model import ModelVersion
from gateway.core.model_config import parse_config_dict, read_config
from gateway.core.model_entry import ModelEntry, check_version, model_name_ok
from gateway.core.mounts import Mount
from gateway.core.repository_index import index_rows
from gateway.core.sealing import model_directory


class Lookups:
    """ModelRepository's queries; the repository gives the attributes below."""

    root: Path
    control_mode: str
    models: dict[str, ModelEntry]
    aliases: dict[str, Path]
    mounts: dict[str, Mount]

    def model_names_on_disk(self) -> list[str]:
        """The repository's model directories, the names given to others inside it, and
        the mounted ones."""
        names = {p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith(".")}
        return sorted(names | set(self.aliases) | set(self.mounts))

    def exists(self, name: str) -> bool:
        if name in self.aliases or name in self.mounts:
            return True
        return model_name_ok(name) and (self.root / name).is_dir()

    def model_dir(self, name: str) -> Path:
        """Where the model's files are: `root/name`, the directory inside the repository
        that a SageMaker load gave that name, or a mounted directory."""
        mount = self.mounts.get(name)
        if mount is not None:
            return mount.directory
        alias = self.aliases.get(name)
        if alias is None:
            return model_directory(self.root, name)
        if not alias.resolve().is_relative_to(self.root.resolve()):
            raise InvalidArgument(
                f"model '{name}': its directory leads outside the model repository"
            )
        return alias

    def config_on_disk(self, name: str) -> mc.ModelConfig:
        """The model's config as the repository holds it: its config.pbtxt, or its mount's."""
        mount = self.mounts.get(name)
        if mount is not None:
            return parse_config_dict(mount.config, f"the config of mounted model '{name}'")
        return read_config(self.model_dir(name))

    def get(self, name: str, version: str = "") -> ModelVersion:
        """The READY model version a request asks for ('' means the latest ready one)."""
        entry = self.models.get(name)
        if version == "" and entry is not None and len(entry.versions) == 1:
            # The common case first, without checks or sorting: one version, ready.
            (state,) = entry.versions.values()
            if state.state == "READY":
                return state.model  # type: ignore[return-value]
        check_version(version)
        if entry is None or not entry.versions:
            if self.control_mode == "on-demand" and self.exists(name):
                raise Unavailable(f"model '{name}' is not loaded; it loads on its first request")
            # Triton's words first: clients match on them.
            raise NotFound(
                f"Request for unknown model: '{name}' is not found" + self._loaded_hint()
            )
        if version == "":
            ready = entry.ready_versions()
            if not ready:
                states = ", ".join(
                    f"{v}: {s.state} {s.reason}".strip() for v, s in entry.versions.items()
                )
                raise Unavailable(
                    f"Request for unknown model: '{name}' has no available versions ({states})"
                )
            return entry.versions[ready[-1]].model  # type: ignore[return-value]
        number = int(version)
        state = entry.versions.get(number)
        if state is None:
            raise NotFound(
                f"Request for unknown model: '{name}' version {number} is not found; "
                "loaded versions: "
                f"{sorted(entry.versions) or 'none'}"
            )
        if state.state != "READY":
            detail = f"{state.state} {state.reason}".strip()
            raise Unavailable(f"model '{name}' version {number} is not ready: {detail}")
        return state.model  # type: ignore[return-value]

    def loaded_names(self) -> list[str]:
        """Models with a version loaded (READY), ready to serve or with a worker restarting."""
        return [name for name, entry in self.models.items() if entry.ready_versions()]

    def _loaded_hint(self) -> str:
        ready = self.loaded_names()
        return f"; ready models: {', '.join(ready)}" if ready else "; no model is ready"

    def is_ready(self, name: str, version: str = "") -> bool:
        """Whether it is ready; an unknown model or version is not, a malformed version is
        an InvalidArgument."""
        check_version(version)
        try:
            model = self.get(name, version)
        except GatewayError:
            return False
        # Requests still queue while a worker restarts, but the model is not ready.
        return model.unavailable_reason is None

    def ready_models(self) -> list[ModelVersion]:
        return [
            state.model
            for entry in self.models.values()
            for state in entry.versions.values()
            if state.model is not None and state.state == "READY"
        ]

    def index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        return index_rows(self, ready_only)
