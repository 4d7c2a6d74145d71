"""TorchServe's management API as operations, for its HTTP front (management_http.py) and
its gRPC front alike: each returns (status, the JSON TorchServe answers) or raises TsError.

- register: an archive named by `url` (a file in the model store, or an http(s) URL that
  matches `allowed_urls`; nothing else is read or fetched) is unpacked into the model
  repository as a model or a new version of one (backends/torchserve/store.py) and
  loaded with `initial_workers` instances, each a worker process; 0 registers it unloaded.
- scale: `min_worker` instances (the pool does not grow between min and max: TorchServe's
  own autoscaling is off by default too); 0 unloads, the files stay.
- describe, list, unregister, set-default as TorchServe's.

A model's instances are per model, not per version (a Triton config is per model): scaling
one version scales them all, and a new version reloads the model, whose versions already
serving go on serving meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from pathlib import Path
from typing import Any

from accel_base.errors import GatewayError
from backends.torchserve.archive import ArchiveError
from backends.torchserve.store import (
    Overrides,
    StoredModel,
    VersionTaken,
    add_archive,
    read_config,
    remove_version,
    set_workers,
)
from gateway.core.interface import Core
from gateway.protocols.torchserve.archives_in import fetch_archive
from gateway.protocols.torchserve.describe import describe_versions
from gateway.protocols.torchserve.models import TorchServeModels, version_not_found
from gateway.protocols.torchserve.replies import NOT_ALLOWED, TsError

log = logging.getLogger("accel_gateway")
Reply = tuple[int, Any]
PROCESSING = {"status": "Processing worker updates..."}


def _whole(value: str | None, name: str, default: int | None) -> int | None:
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except ValueError:
        raise TsError(400, f"Invalid parameter {name}: {value} is not a whole number") from None
    if number < 0:
        raise TsError(400, f"Invalid parameter {name}: {value} must not be negative")
    return number


def _flag(value: str | None, default: bool) -> bool:
    return default if value is None else value.lower() == "true"


class Management:
    def __init__(self, core: Core, models: TorchServeModels) -> None:
        self.core, self.models = core, models
        self._tasks: set[asyncio.Task] = set()  # asynchronous worker updates in flight
        self._registering = asyncio.Lock()  # one archive unpacked at a time: names clash
        self._warned = False  # the model API's refusal is logged once

    # ---- register and unregister ------------------------------------------------------

    async def register(self, params: dict[str, str]) -> Reply:
        models = self.models
        self._check_model_api()
        url = params.get("url", "")
        if not url:
            raise TsError(400, "Parameter url is required.")
        if params.get("runtime", "python") not in ("python", "python3"):
            raise TsError(400, f"runtime {params['runtime']}: only Python handlers are served")
        overrides = Overrides(
            batch_size=_whole(params.get("batch_size"), "batch_size", None),
            max_batch_delay_ms=_whole(params.get("max_batch_delay"), "max_batch_delay", None),
            workers=None,
            handler=params.get("handler") or None,
            response_timeout_s=_whole(params.get("response_timeout"), "response_timeout", None),
        )
        workers = _whole(params.get("initial_workers"), "initial_workers", 0) or 0
        synchronous = _flag(params.get("synchronous"), True)
        async with fetch_archive(url, models) as source:
            try:
                async with self._registering:
                    stored = await asyncio.to_thread(
                        add_archive, source, models.repository, models.defaults,
                        params.get("model_name") or None, overrides,
                    )  # fmt: skip
            except VersionTaken as exc:
                raise TsError(409, str(exc), "ConflictStatusException") from None
            except ArchiveError as exc:
                raise TsError(400, f"{url}: {exc}", "ModelException") from None
        models.urls[(stored.name, stored.version)] = url
        registered = f'Model "{stored.name}" Version: {stored.version} registered with'
        if workers == 0:
            if stored.name in await self.core.loaded_models():  # a new version: served too
                await self._reload(stored.name)
            return 200, {"status": f"{registered} 0 initial workers. Use scale workers API "
                                   "to add workers for the model."}  # fmt: skip
        await asyncio.to_thread(set_workers, stored.directory, workers)
        if not synchronous:
            self._in_background(self._load_new(stored))
            return 202, PROCESSING
        await self._load_new(stored)
        return 200, {"status": f"{registered} {workers} initial workers"}

    async def _load_new(self, stored: StoredModel) -> None:
        try:
            await self._reload(stored.name)
        except GatewayError:
            # A version that cannot load is not left registered (TorchServe's register fails whole).
            await asyncio.to_thread(self._forget_version, stored.directory, stored.version)
            raise

    def _forget_version(self, directory: Path, version: str) -> None:
        if not remove_version(directory, version):
            shutil.rmtree(directory, ignore_errors=True)

    async def unregister(self, name: str, version: str = "") -> Reply:
        models = self.models
        self._check_model_api()
        async with models.lock(name):
            versions = models.versions(name)
            version = version or models.default_version(name, versions)
            if version not in versions:
                raise version_not_found(name, version)
            if len(versions) > 1 and version == models.default_version(name, versions):
                raise TsError(
                    403, f"Cannot remove default version for model {name}",
                    "InvalidModelVersionException",
                )  # fmt: skip
            directory = models.repository / name
            loaded = name in await self.core.loaded_models()
            if len(versions) == 1:
                if loaded:
                    await self.core.unload_model(name, models.admin_token)
                await asyncio.to_thread(shutil.rmtree, directory, True)
                models.default_versions.pop(name, None)
                models.started.pop(name, None)
            else:
                await asyncio.to_thread(remove_version, directory, version)
                if loaded:  # the version's instances end; the others go on serving
                    await self.core.load_model(name, models.admin_token)
            models.urls.pop((name, version), None)
        return 200, {"status": f'Model "{name}" unregistered'}

    def _check_model_api(self) -> None:
        """Registration is off unless asked for (TorchServe 0.12's default): its clients
        get TorchServe's 405, the operator a line in the log that says how to turn it on."""
        if self.models.model_api:
            return
        if not self._warned:
            self._warned = True
            log.warning("TorchServe management: a registration or unregistration was "
                        "refused: the model API is off (--enable-model-api, or "
                        "enable_model_api=true in config.properties)")  # fmt: skip
        raise TsError(405, NOT_ALLOWED, "MethodNotAllowedException")

    # ---- workers ----------------------------------------------------------------------

    async def scale(self, name: str, version: str, params: dict[str, str]) -> Reply:
        models = self.models
        versions = models.versions(name)
        if version and version not in versions:
            raise version_not_found(name, version)
        least = _whole(params.get("min_worker"), "min_worker", 1) or 0
        most = _whole(params.get("max_worker"), "max_worker", least)
        if most is not None and most < least:
            raise TsError(400, "max_worker cannot be less than min_worker.")
        if params.get("number_gpu") not in (None, "", "0"):
            raise TsError(400, "number_gpu: this server places models by memory itself")
        synchronous = _flag(params.get("synchronous"), False)
        work = self._scale(name, least)
        if not synchronous:
            self._in_background(work)
            return 202, PROCESSING
        await work
        shown = f", version: {version}" if version else ""
        return 200, {"status": f"Workers scaled to {least} for model: {name}{shown}"}

    async def _scale(self, name: str, workers: int) -> None:
        models = self.models
        async with models.lock(name):
            loaded = name in await self.core.loaded_models()
            if workers == 0:
                if loaded:
                    await self.core.unload_model(name, models.admin_token)
                return
            config = await asyncio.to_thread(read_config, models.repository / name)
            if loaded and config.instance_group[0].count == workers:
                return
            await asyncio.to_thread(set_workers, models.repository / name, workers)
            await self._reload(name, locked=True)

    async def _reload(self, name: str, locked: bool = False) -> None:
        if not locked:
            async with self.models.lock(name):
                return await self._reload(name, locked=True)
        await self.core.load_model(name, self.models.admin_token)
        self.models.mark_started(name)

    def _in_background(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)

        def done(finished: asyncio.Task) -> None:
            self._tasks.discard(finished)
            if not finished.cancelled() and finished.exception() is not None:
                log.warning("TorchServe management: a worker update failed: %s",
                            finished.exception())  # fmt: skip

        task.add_done_callback(done)

    # ---- reading ----------------------------------------------------------------------

    async def list(self, limit: str | None, token: str | None) -> Reply:
        count = _whole(limit, "limit", 100) or 100
        start = _whole(token, "next_page_token", 0) or 0
        names = self.models.registered()
        page = names[start : start + count]
        listed = [{"modelName": n, "modelUrl": self.models.url(n, self.models.default_version(
            n, self.models.versions(n)))} for n in page]  # fmt: skip
        answer: dict[str, Any] = {}
        if len(page) == count:  # a full page: TorchServe gives a token, more or not
            answer["nextPageToken"] = str(start + count)
        answer["models"] = listed
        return 200, answer

    async def describe(self, name: str, version: str, customized: bool) -> Reply:
        return 200, await describe_versions(self.core, self.models, name, version, customized)

    async def set_default(self, name: str, version: str) -> Reply:
        models = self.models
        versions = models.versions(name)
        if version not in versions:  # (TorchServe's words, without the colons here)
            raise TsError(404, f"Model version {version} does not exist for model {name}",
                          "ModelVersionNotFoundException")  # fmt: skip
        models.default_versions[name] = version
        return 200, {
            "status": f'Default version successfully updated for model "{name}" to "{version}"'
        }
