"""TorchServe's management API as operations, for its HTTP front (management_http.py) and
its gRPC front alike: each returns (status, the JSON TorchServe answers) or raises TsError.

- register: an archive named by `url` (a file in the model store, or an http(s) URL that
  matches `allowed_urls`; nothing else is read or fetched) is unpacked into the model
  repository as a model or a new version of one (backends/torchserve/store.py) and
  loaded with `initial_workers` instances, each a worker process; 0 registers it unloaded.
- scale (scaling.py): `min_worker` instances; 0 unloads, the files stay.
- describe, list, unregister, set-default as TorchServe's.

Every change to a model is made under its lock, and a change that fails half way is
undone (snapshot.py): a version that cannot load leaves no trace, and the versions that
served go on serving. A model's instances are per model, not per version (a Triton config
is per model): a new version reloads the model, whose versions serving go on meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from typing import Any

from backends.torchserve.archive import ArchiveError
from backends.torchserve.store import (
    Overrides,
    StoredModel,
    VersionTaken,
    forget_version,
    place_archive,
    set_workers,
    stage_archive,
)
from gateway.core.interface import Core
from gateway.protocols.torchserve.archives_in import fetch_archive
from gateway.protocols.torchserve.describe import describe_versions
from gateway.protocols.torchserve.models import TorchServeModels, version_not_found
from gateway.protocols.torchserve.numbers import flag, whole
from gateway.protocols.torchserve.replies import NOT_ALLOWED, TsError
from gateway.protocols.torchserve.scaling import Scaling
from gateway.protocols.torchserve.snapshot import Snapshot

log = logging.getLogger("accel_gateway")
Reply = tuple[int, Any]
PROCESSING = {"status": "Processing worker updates..."}


class Management(Scaling):
    def __init__(self, core: Core, models: TorchServeModels) -> None:
        super().__init__(core, models)
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
            batch_size=whole(params, "batch_size"),
            max_batch_delay_ms=whole(params, "max_batch_delay"),
            handler=params.get("handler") or None,
            response_timeout_s=whole(params, "response_timeout"),
        )
        workers = whole(params, "initial_workers") or 0
        synchronous = flag(params.get("synchronous"), True)
        async with fetch_archive(url, models) as source:
            try:
                staged = await asyncio.to_thread(stage_archive, source, models.repository)
            except ArchiveError as exc:
                raise TsError(400, f"{url}: {exc}", "ModelException") from None
        try:
            name = staged.name(params.get("model_name") or None)
            lock = models.lock(name)
            await lock.acquire()  # released here, or by the load that goes on after a 202
            later = False
            try:
                snapshot = await Snapshot.take(self.core, models.repository, name)
                try:
                    stored = await asyncio.to_thread(
                        place_archive, staged, models.repository, models.defaults, name,
                        overrides,
                    )  # fmt: skip
                except VersionTaken as exc:
                    raise TsError(409, str(exc), "ConflictStatusException") from None
                snapshot.added = stored.directory / stored.number
                models.urls[(stored.name, stored.version)] = url
                status = _registered(stored, workers)
                if workers:
                    await asyncio.to_thread(set_workers, stored.directory, workers)
                elif not snapshot.loaded:
                    return 200, {"status": status}
                if not synchronous and workers:
                    later = True
                    self._in_background(self._load_later(snapshot, lock))
                    return 202, PROCESSING
                await self._load_or_undo(snapshot)  # a new version of a loaded model too
                return 200, {"status": status}
            finally:
                if not later:
                    lock.release()
        except ArchiveError as exc:
            raise TsError(400, f"{url}: {exc}", "ModelException") from None
        finally:
            staged.discard()

    async def _load_or_undo(self, snapshot: Snapshot) -> None:
        """Load the model as its files now say (under its lock), or put it back."""
        try:
            await self.core.load_model(snapshot.name, self.models.admin_token)
        except BaseException:
            # A version that cannot load is not left registered (TorchServe's register
            # fails whole), and what served before serves again.
            await snapshot.restore(self.core, self.models.admin_token)
            raise
        self.models.mark_started(snapshot.name)

    async def _load_later(self, snapshot: Snapshot, lock: asyncio.Lock) -> None:
        """A registration's load after its 202, holding the lock the registration took."""
        try:
            await self._load_or_undo(snapshot)
        except Exception as exc:
            log.warning("TorchServe management: model '%s' could not load and was not "
                        "registered: %s", snapshot.name, exc)  # fmt: skip
        finally:
            lock.release()

    async def unregister(self, name: str, version: str = "") -> Reply:
        models = self.models
        self._check_model_api()
        models.versions(name)  # ModelNotFound before anything is held for the name
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
            if len(versions) == 1:
                if name in await self.core.loaded_models():
                    await self.core.unload_model(name, models.admin_token)
                await asyncio.to_thread(shutil.rmtree, directory, True)
                models.forget(name)
            else:
                snapshot = await Snapshot.take(self.core, models.repository, name)
                number = await asyncio.to_thread(forget_version, directory, version)
                if snapshot.loaded:  # its instances end; the other versions go on serving
                    await self._load_or_undo(snapshot)
                # Its files go only once no worker of it runs there.
                await asyncio.to_thread(shutil.rmtree, directory / number, True)
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

    # ---- reading ----------------------------------------------------------------------

    async def list(self, limit: str | None, token: str | None) -> Reply:
        count = whole({"limit": limit or ""}, "limit") or 100
        start = whole({"next_page_token": token or ""}, "next_page_token") or 0
        models = self.models
        names = await asyncio.to_thread(models.registered)
        page = names[start : start + count]
        listed = []
        for name in page:
            try:
                url = models.url(name, models.default_version(name, models.versions(name)))
            except TsError:  # unregistered meanwhile
                continue
            listed.append({"modelName": name, "modelUrl": url})
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


def _registered(stored: StoredModel, workers: int) -> str:
    said = f'Model "{stored.name}" Version: {stored.version} registered with {workers} '
    if workers:
        return said + "initial workers"
    return said + "initial workers. Use scale workers API to add workers for the model."
