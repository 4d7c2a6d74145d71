"""SageMaker's multi-model container contract: the `/models` routes on the SageMaker port.

    POST   /models                 {"model_name": NAME, "url": DIR}: load DIR as NAME;
                                   409 if NAME is loaded, 507 if it cannot fit
    GET    /models                 the loaded models, paginated (next_page_token,
                                   max_results; the answer's nextPageToken)
    GET    /models/{name}          one loaded model, 404 otherwise
    DELETE /models/{name}          unload it, 404 if it is not loaded
    POST   /models/{name}/invoke   inference, as /invocations takes it

`url` is where SageMaker unpacked the model's archive: a Triton model directory, or a
directory holding exactly one. It must lie inside the model repository (SageMaker's
/opt/ml/models, given as --model-repository): files come from nowhere else. Loads go
through the same placement as every other load (gateway/core/placement), so a model that does
not fit gets 507, and SageMaker unloads the models it used least and tries again; in
on-demand mode the gateway evicts them itself first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from accel_base.errors import GatewayError, InvalidArgument, NotFound
from gateway.core.placement.ledger import NoRoom
from gateway.core.service import InferenceCore
from gateway.protocols.http.body import read_body

MAX_MANAGEMENT_BODY = 64 * 1024
DEFAULT_PAGE = 100
CONFIG_FILES = ("config.pbtxt", "config.yaml")


class Conflict(GatewayError):
    http_status = 409
    grpc_status = "ALREADY_EXISTS"


class InsufficientStorage(GatewayError):
    """SageMaker's signal to unload models and try the load again."""

    http_status = 507
    grpc_status = "RESOURCE_EXHAUSTED"


def _is_model_dir(path: Path) -> bool:
    return any((path / name).is_file() for name in CONFIG_FILES)


def model_dir_of(url: Any, root: Path) -> Path:
    """The Triton model directory at `url` (or the one directory inside it), which must be
    inside the repository `root`."""
    if not isinstance(url, str) or not url or "\0" in url:
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


class SageMakerModels:
    def __init__(self, core: InferenceCore) -> None:
        self.core = core
        self.urls: dict[str, str] = {}  # model name -> the url it was loaded from
        self._loading: set[str] = set()  # names a POST is loading now

    def _loaded(self, name: str) -> bool:
        entry = self.core.repository.models.get(name)
        return entry is not None and bool(entry.ready_versions())

    def _described(self, name: str) -> dict[str, str]:
        return {"modelName": name, "modelUrl": self.urls.get(name, name)}

    def known(self, name: str) -> bool:
        """Loaded through /models and not unloaded since (evicted, on demand, counts)."""
        return name in self.urls

    async def load(self, receive, headers: dict[bytes, bytes]) -> dict[str, Any]:
        self.core.check_token(_token(headers))
        body = await read_body(receive, headers.get(b"content-length"), MAX_MANAGEMENT_BODY)
        try:
            request = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise InvalidArgument(f"the body must be JSON: {exc}") from None
        if not isinstance(request, dict):
            raise InvalidArgument('the body must be {"model_name": ..., "url": ...}')
        name = request.get("model_name")
        if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
            raise InvalidArgument("'model_name' must be a non-empty name without '/'")
        repository = self.core.repository
        if self._loaded(name) or name in self._loading:
            raise Conflict(f"model '{name}' is already loaded")
        model_dir = model_dir_of(request.get("url"), repository.root)
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
        self.urls[name] = request["url"]
        return {"status": f"model '{name}' loaded"}

    def _forget(self, name: str) -> None:
        """A name SageMaker no longer has loaded: nothing of it stays behind."""
        repository = self.core.repository
        self.urls.pop(name, None)
        if name in repository.aliases:
            repository.aliases.pop(name)
            entry = repository.models.get(name)
            if entry is not None and not any(s.model for s in entry.versions.values()):
                del repository.models[name]

    def list(self, query: dict[str, str]) -> dict[str, Any]:
        names = sorted(n for n in self.core.repository.models if self._loaded(n))
        start = _count(query.get("next_page_token", "0"), "next_page_token")
        size = _count(query.get("max_results", str(DEFAULT_PAGE)), "max_results") or DEFAULT_PAGE
        page: dict[str, Any] = {"models": [self._described(n) for n in names[start : start + size]]}
        if start + size < len(names):
            page["nextPageToken"] = str(start + size)
        return page

    def get(self, name: str) -> dict[str, str]:
        if not self._loaded(name):
            raise NotFound(f"model '{name}' is not loaded")
        return self._described(name)

    async def unload(self, name: str, headers: dict[bytes, bytes]) -> dict[str, str]:
        self.core.check_token(_token(headers))
        if not self._loaded(name) and not self.known(name):
            raise NotFound(f"model '{name}' is not loaded")
        await self.core.repository.unload(name)
        self._forget(name)
        return {"status": f"model '{name}' unloaded"}


def _token(headers: dict[bytes, bytes]) -> str | None:
    """The bearer token of the Authorization header, as the V2 routes take it."""
    value = headers.get(b"authorization", b"").decode("latin-1")
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


def _count(text: str, key: str) -> int:
    if not text.isdigit():
        raise InvalidArgument(f"'{key}' must be a non-negative integer, not '{text[:40]}'")
    return int(text)
