"""Models loaded from a directory under a name the caller chooses, and repository models
loaded by the first request that names them: SageMaker's two ways of choosing a model
(its multi-model `POST /models` and its `X-Amzn-SageMaker-Target-Model` header), kept
in the core so that the SageMaker front asks for them through `Core` like any front.

A directory load names a Triton model directory (or a directory holding exactly one)
inside the model repository: files come from nowhere else. It goes through the same
placement as every other load, so a model that does not fit gets 507
(InsufficientStorage), SageMaker's signal to unload models and try again; on demand,
the gateway evicts idle models itself first.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from accel_base.errors import (
    Conflict,
    GatewayError,
    InsufficientStorage,
    InvalidArgument,
    NotFound,
)
from gateway.core.placement.ledger import NoRoom
from gateway.core.repository import ModelRepository

log = logging.getLogger(__name__)

CONFIG_FILES = ("config.pbtxt", "config.yaml")


def _is_model_dir(path: Path) -> bool:
    return any((path / name).is_file() for name in CONFIG_FILES)


def model_dir_of(url: str, root: Path) -> Path:
    """The Triton model directory at `url` (or the one directory inside it), which must be
    inside the repository `root`."""
    if not url or "\0" in url:
        raise InvalidArgument("'url' must be the path of the model's directory, as a string")
    path = Path(url).resolve()
    if not path.is_relative_to(root.resolve()):
        raise InvalidArgument(
            "'url' must be a directory inside the model repository (--model-repository)"
        )
    if not path.is_dir():
        raise NotFound("'url' names no directory inside the model repository")
    if _is_model_dir(path):
        return path
    inside = [p for p in path.iterdir() if p.is_dir() and _is_model_dir(p)]
    if len(inside) != 1:
        raise InvalidArgument(
            "'url' must be a Triton model directory (config.pbtxt and version folders), or "
            f"hold exactly one; it holds {len(inside)}"
        )
    model_dir = inside[0].resolve()  # a link inside an archive may lead anywhere
    if not model_dir.is_relative_to(root.resolve()):
        raise InvalidArgument("the model directory in 'url' leads outside the model repository")
    return model_dir


class DirectoryModels:
    def __init__(self, repository: ModelRepository) -> None:
        self.repository = repository
        self.urls: dict[str, str] = {}  # model name -> the url it was loaded from
        self._loading: set[str] = set()  # names a directory load is loading now
        # One load per model, ever, started by its first request: concurrent first
        # requests share it, a model that failed to load is not loaded again on every
        # request, and a model an administrator unloads stays unloaded.
        self._first_loads: dict[str, asyncio.Task] = {}

    def _loaded(self, name: str) -> bool:
        entry = self.repository.models.get(name)
        return entry is not None and bool(entry.ready_versions())

    async def load(self, name: str, url: str) -> None:
        if not name or "/" in name or name.startswith("."):
            raise InvalidArgument("'model_name' must be a non-empty name without '/'")
        repository = self.repository
        if self._loaded(name) or name in self._loading:
            raise Conflict(f"model '{name}' is already loaded")
        model_dir = model_dir_of(url, repository.root)
        # SageMaker's own layout puts the model under a directory of its name
        # (<repository>/<name>/model/...): that is fine; a Triton model of that name is not.
        own = repository.root / name
        taken = name in repository.models or (_is_model_dir(own) and own.resolve() != model_dir)
        if taken and name not in repository.aliases:
            raise Conflict(f"'{name}' is the name of a model in the repository; choose another")
        self._loading.add(name)
        repository.aliases[name] = model_dir
        try:
            await repository.load(name)
        except NoRoom as exc:
            self._forget(name)
            raise InsufficientStorage(exc.message) from None
        except GatewayError:
            self._forget(name)
            raise
        finally:
            self._loading.discard(name)
        self.urls[name] = url

    async def unload(self, name: str) -> None:
        if not self._loaded(name) and name not in self.urls:
            raise NotFound(f"model '{name}' is not loaded")
        await self.repository.unload(name)
        self._forget(name)

    def _forget(self, name: str) -> None:
        """A name no longer loaded from its directory: nothing of it stays behind."""
        repository = self.repository
        self.urls.pop(name, None)
        if name in repository.aliases:
            repository.aliases.pop(name)
            entry = repository.models.get(name)
            if entry is not None and not any(s.model for s in entry.versions.values()):
                del repository.models[name]

    async def load_on_first_use(self, name: str) -> None:
        """A repository model a request names, loaded by the first such request (on
        demand, the request itself loads it, or says why not)."""
        repository = self.repository
        if self._loaded(name) or repository.control_mode == "on-demand":
            return  # (one whose worker restarts is loaded: its requests wait for it)
        if not name or name.startswith(".") or name not in repository.model_names_on_disk():
            raise NotFound(f"model '{name}' is not in the model repository")
        loading = self._first_loads.get(name)
        if loading is None or (loading.done() and (loading.cancelled() or loading.exception())):
            # (a load that failed is tried again by the next request)
            log.info("loading model '%s' for its first request", name)
            self._first_loads[name] = asyncio.ensure_future(repository.load(name))
        await asyncio.shield(self._first_loads[name])
