"""Loads the repository starts itself (gateway/core/repository.py): the models a control
mode loads at start, and the members an ensemble or a router needs, loaded with it as
Triton loads an ensemble's models."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from accel_base.errors import GatewayError, InvalidArgument
from accel_base.proto import model_config_pb2 as mc
from gateway.core.ensemble.plan import is_ensemble
from gateway.core.model import ModelVersion
from gateway.core.model_entry import ModelEntry
from gateway.core.on_demand import OnDemand
from gateway.core.routing.config import is_router
from gateway.core.routing.router import RouterModel
from gateway.core.scheduling.instances import usable_cores

log = logging.getLogger(__name__)


class MemberLoads:
    """ModelRepository's own loads; the repository gives the attributes below."""

    control_mode: str
    models: dict[str, ModelEntry]
    on_demand: OnDemand
    load: Callable[..., Awaitable[None]]
    exists: Callable[[str], bool]
    model_dir: Callable[[str], Path]
    config_on_disk: Callable[[str], mc.ModelConfig]
    get: Callable[[str, str], ModelVersion]
    model_names_on_disk: Callable[[], list[str]]

    async def load_startup_models(self, names: list[str]) -> None:
        """Load what the control mode says to load at start (all models, or the named ones)."""
        if self.control_mode == "explicit":
            targets = self.model_names_on_disk() if "*" in names else names
        elif self.control_mode == "on-demand":  # pinned and named; the rest wait for requests
            targets = [
                n for n in self.model_names_on_disk()
                if n in names or "*" in names or self.on_demand.pinned_on_disk(n)
            ]  # fmt: skip
        else:
            targets = self.model_names_on_disk()
        # Several at once: most of a load is a worker process importing its framework.
        slots = asyncio.Semaphore(max(2, usable_cores()))

        async def load(name: str) -> None:
            async with slots:
                try:
                    await self.load(name)
                except GatewayError as exc:
                    log.error("model '%s' did not load: %s", name, exc.message)

        # Models first, then ensembles, then routers: each finds what it is made of
        # loaded (or failed, with the reason).
        kinds = {name: self._kind_on_disk(name) for name in targets}
        for kind in ("model", "ensemble", "router"):
            await asyncio.gather(*(load(name) for name in targets if kinds[name] == kind))

    def _kind_on_disk(self, name: str) -> str:
        try:
            config = self.config_on_disk(name)
        except GatewayError:
            return "model"  # its own load says what is wrong
        return "router" if is_router(config) else "ensemble" if is_ensemble(config) else "model"

    async def _load_variant(self, router: str, name: str, version: str) -> ModelVersion:
        """A router's variant, loaded now if it is not (as its last load left it)."""
        if not self.exists(name):
            raise InvalidArgument(
                f"router '{router}': variant '{name}' is not in the model repository"
            )
        entry = self.models.get(name)
        if (entry is None or not entry.ready_versions()) and is_router(self.config_on_disk(name)):
            raise InvalidArgument(
                f"router '{router}': variant '{name}' is a router; variants must be models"
            )
        model = await self._load_member(name, version)
        if isinstance(model, RouterModel):
            raise InvalidArgument(
                f"router '{router}': variant '{name}' is a router; variants must be models"
            )
        return model

    async def _load_step_model(self, ensemble: str, name: str, version: str) -> Any:
        """An ensemble step's model, loaded now if it is not (as Triton loads an ensemble's
        models with it)."""
        if not self.exists(name):
            raise InvalidArgument(
                f"ensemble '{ensemble}': step model '{name}' is not in the model repository"
            )
        return await self._load_member(name, version)

    async def _load_member(self, name: str, version: str) -> Any:
        entry = self.models.get(name)
        if entry is None or not entry.ready_versions():
            await self.load(name, entry.override if entry else None, if_unloaded=True)
        return self.get(name, version)
