"""TorchServe's scale-workers call: `min_worker` instances of a model (0 unloads it and
keeps it registered). The pool does not grow between `min_worker` and `max_worker`
(TorchServe's own autoscaling is off by default too). An asynchronous scale (TorchServe's
default) is applied in the background, one update a model at a time: calls that come
while one runs leave only their last count to apply, so a burst of calls costs one more
reload, not one each."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from backends.torchserve.store import read_config, set_workers, workers_of
from gateway.core.interface import Core
from gateway.protocols.torchserve.models import TorchServeModels, version_not_found
from gateway.protocols.torchserve.numbers import flag, whole
from gateway.protocols.torchserve.replies import TsError
from gateway.protocols.torchserve.snapshot import Snapshot

log = logging.getLogger("accel_gateway")


class Scaling:
    def __init__(self, core: Core, models: TorchServeModels) -> None:
        self.core, self.models = core, models
        self._wanted: dict[str, int] = {}  # the last count asked of a model, not yet applied
        self._updating: dict[str, asyncio.Task] = {}  # at most one update a model
        self._tasks: set[asyncio.Task] = set()  # other background work (a 202's load)

    async def scale(self, name: str, version: str, params: dict[str, str]) -> tuple[int, Any]:
        versions = self.models.versions(name)
        if version and version not in versions:
            raise version_not_found(name, version)
        least = whole(params, "min_worker")
        least = 1 if least is None else least
        most = whole(params, "max_worker")
        if most is not None and most < least:
            raise TsError(400, "max_worker cannot be less than min_worker.")
        if params.get("number_gpu") not in (None, "", "0"):
            raise TsError(400, "number_gpu: this server places models by memory itself")
        if not flag(params.get("synchronous"), False):
            self._wanted[name] = least
            if name not in self._updating:
                self._updating[name] = asyncio.ensure_future(self._apply_wanted(name))
            return 202, {"status": "Processing worker updates..."}
        await self._scale(name, least)
        shown = f", version: {version}" if version else ""
        return 200, {"status": f"Workers scaled to {least} for model: {name}{shown}"}

    async def _apply_wanted(self, name: str) -> None:
        try:
            while name in self._wanted:
                workers = self._wanted.pop(name)
                try:
                    await self._scale(name, workers)
                except Exception as exc:
                    log.warning("TorchServe management: scaling model '%s' to %d workers "
                                "failed: %s", name, workers, exc)  # fmt: skip
        finally:
            self._updating.pop(name, None)

    async def _scale(self, name: str, workers: int) -> None:
        models = self.models
        async with models.lock(name):
            models.versions(name)  # unregistered meanwhile: ModelNotFound
            snapshot = await Snapshot.take(self.core, models.repository, name)
            if workers == 0:
                if snapshot.loaded:
                    await self.core.unload_model(name, models.admin_token)
                return
            config = await asyncio.to_thread(read_config, snapshot.directory)
            if snapshot.loaded and workers_of(config) == workers:
                return
            await asyncio.to_thread(set_workers, snapshot.directory, workers)
            try:
                await self.core.load_model(name, models.admin_token)
            except BaseException:
                await snapshot.restore(self.core, models.admin_token)
                raise
            models.mark_started(name)

    def _in_background(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
