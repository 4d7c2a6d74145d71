"""SageMaker's multi-model container contract: the `/models` routes on the SageMaker port.

    POST   /models                 {"model_name": NAME, "url": DIR}: load DIR as NAME;
                                   409 if NAME is loaded, 507 if it cannot fit
    GET    /models                 the loaded models, paginated (next_page_token,
                                   max_results; the answer's nextPageToken)
    GET    /models/{name}          one loaded model, 404 otherwise
    DELETE /models/{name}          unload it, 404 if it is not loaded
    POST   /models/{name}/invoke   inference, as /invocations takes it

`url` is where SageMaker unpacked the model's archive: a Triton model directory, or a
directory holding exactly one, inside the model repository (SageMaker's /opt/ml/models,
given as --model-repository). The core loads it (Core.load_model_directory,
gateway/core/directory_models.py): a model that does not fit gets 507, and SageMaker
unloads the models it used least and tries again; in on-demand mode the gateway evicts
them itself first.
"""

from __future__ import annotations

from typing import Any

import orjson

from accel_base.errors import InvalidArgument, NotFound
from gateway.core.interface import Core
from gateway.protocols.http.body import read_body

MAX_MANAGEMENT_BODY = 64 * 1024
DEFAULT_PAGE = 100


class SageMakerModels:
    def __init__(self, core: Core) -> None:
        self.core = core

    async def load(self, receive, headers: dict[bytes, bytes]) -> dict[str, Any]:
        body = await read_body(receive, headers.get(b"content-length"), MAX_MANAGEMENT_BODY)
        try:
            request = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise InvalidArgument(f"the body must be JSON: {exc}") from None
        if not isinstance(request, dict):
            raise InvalidArgument('the body must be {"model_name": ..., "url": ...}')
        name, url = _text(request, "model_name"), _text(request, "url")
        await self.core.load_model_directory(name, url, _token(headers))
        return {"status": f"model '{name}' loaded"}

    async def list(self, query: dict[str, str]) -> dict[str, Any]:
        names, urls = await self.core.loaded_models(), await self.core.model_directories()
        start = _count(query.get("next_page_token", "0"), "next_page_token")
        size = _count(query.get("max_results", str(DEFAULT_PAGE)), "max_results") or DEFAULT_PAGE
        page: dict[str, Any] = {
            "models": [_described(n, urls) for n in names[start : start + size]]
        }
        if start + size < len(names):
            page["nextPageToken"] = str(start + size)
        return page

    async def get(self, name: str) -> dict[str, str]:
        if name not in await self.core.loaded_models():
            raise NotFound(f"model '{name}' is not loaded")
        return _described(name, await self.core.model_directories())

    async def unload(self, name: str, headers: dict[bytes, bytes]) -> dict[str, str]:
        await self.core.unload_model_directory(name, _token(headers))
        return {"status": f"model '{name}' unloaded"}


def _text(request: dict[str, Any], key: str) -> str:
    value = request.get(key)
    if not isinstance(value, str):
        raise InvalidArgument(f"'{key}' must be a string, not {type(value).__name__}")
    return value


def _described(name: str, urls: dict[str, str]) -> dict[str, str]:
    return {"modelName": name, "modelUrl": urls.get(name, name)}


def _token(headers: dict[bytes, bytes]) -> str | None:
    """The bearer token of the Authorization header, as the V2 routes take it."""
    value = headers.get(b"authorization", b"").decode("latin-1")
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


def _count(text: str, key: str) -> int:
    if not text.isdigit():
        raise InvalidArgument(f"'{key}' must be a non-negative integer, not '{text[:40]}'")
    return int(text)
