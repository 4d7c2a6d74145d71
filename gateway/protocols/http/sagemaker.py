"""SageMaker's inference-container contract, on its own port (8080).

- `GET /ping`: 200 once the server has started, else 503 (SageMaker's health check).
- `POST /invocations`: a V2 infer body, JSON or the binary tensor extension, exactly as
  `POST /v2/models/<name>/infer` takes it. The binary extension's JSON length comes in
  `Inference-Header-Content-Length`, or, since InvokeEndpoint forwards only its own
  headers, in the content type `application/vnd.sagemaker-triton.binary+json;
  json-header-size=N` (as Triton's SageMaker front-end reads it).
- The `X-Amzn-SageMaker-Target-Model` header names the model (the artifact's path, e.g.
  `digits.tar.gz`; its file name without the archive suffix is the repository's model
  name), which is loaded from the repository on its first request. Without the header,
  the one model the server has ready answers.

- SageMaker's multi-model routes (`/models`, gateway/protocols/http/sagemaker_models.py).
"""

from __future__ import annotations

import logging
from pathlib import PurePosixPath
from urllib.parse import parse_qs, unquote

import orjson

from accel_base.errors import InvalidArgument, NotFound, Unavailable
from gateway.core.interface import Core
from gateway.protocols.http.infer_route import (
    ASGIApp,
    Receive,
    Scope,
    Send,
    answer_errors,
    error,
    respond,
    serve_infer,
)
from gateway.protocols.http.sagemaker_models import SageMakerModels

log = logging.getLogger(__name__)

TARGET_MODEL_HEADER = b"x-amzn-sagemaker-target-model"
HEADER_LENGTH_KEY = b"inference-header-content-length"
BINARY_CONTENT_TYPE = "application/vnd.sagemaker-triton.binary+json"
_ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".zip")


def model_name_of(target: str) -> str:
    """`models/digits.tar.gz` -> `digits`: the repository name of a target model."""
    name = PurePosixPath(target.strip()).name
    for suffix in _ARCHIVE_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def binary_header_length(content_type: str) -> str | None:
    """N from `application/vnd.sagemaker-triton.binary+json;json-header-size=N`: SageMaker's
    InvokeEndpoint passes only its own headers on, so the binary extension's JSON length
    travels in the content type instead of Inference-Header-Content-Length."""
    media_type, *parameters = (part.strip() for part in content_type.split(";"))
    if media_type.lower() != BINARY_CONTENT_TYPE:
        return None
    for parameter in parameters:
        key, _, value = parameter.partition("=")
        if key.strip().lower() == "json-header-size":
            return value.strip()
    raise InvalidArgument(f"content type {BINARY_CONTENT_TYPE} needs json-header-size=<bytes>")


def create_sagemaker_app(core: Core, max_body_bytes: int) -> ASGIApp:
    async def resolve_model(scope: Scope) -> str:
        target = dict(scope["headers"]).get(TARGET_MODEL_HEADER)
        if target is None:
            ready = await core.loaded_models()  # one restarting is loaded: it waits
            if not ready:
                raise Unavailable(
                    "no model is ready; name one with the X-Amzn-SageMaker-Target-Model header"
                )
            if len(ready) > 1:
                raise InvalidArgument(
                    f"{len(ready)} models are ready ({', '.join(ready)}); name one with the "
                    "X-Amzn-SageMaker-Target-Model header"
                )
            return ready[0]
        name = model_name_of(target.decode("latin-1"))
        try:
            await core.load_on_first_use(name)
        except NotFound:
            raise NotFound(
                f"target model '{target.decode('latin-1')}' is not in the model repository"
            ) from None
        return name

    async def invoke(scope: Scope, receive: Receive, send: Send) -> None:
        name = await resolve_model(scope)
        await serve_infer(core, max_body_bytes, _binary_length(scope), receive, send, name, "")

    models = SageMakerModels(core)

    async def manage(scope: Scope, receive: Receive, send: Send) -> None:
        """The multi-model routes (gateway/protocols/http/sagemaker_models.py)."""
        method, path = scope["method"], scope["path"]
        parts = path.split("/")[2:]  # after "/models"
        if parts == [] and method == "POST":
            answer = await models.load(receive, dict(scope["headers"]))
        elif parts == [] and method == "GET":
            query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
            answer = await models.list({key: values[-1] for key, values in query.items()})
        elif len(parts) == 1 and method == "GET":
            answer = await models.get(unquote(parts[0]))
        elif len(parts) == 1 and method == "DELETE":
            answer = await models.unload(unquote(parts[0]), dict(scope["headers"]))
        elif len(parts) == 2 and parts[1] == "invoke" and method == "POST":
            name = unquote(parts[0])
            if name not in await core.model_directories():
                await models.get(name)  # 404 unless loaded (on demand, an evicted one reloads)
            await serve_infer(core, max_body_bytes, _binary_length(scope), receive, send, name, "")
            return
        else:
            raise NotFound(f"no such endpoint: {method} {path}")
        await respond(send, 200, orjson.dumps(answer), [(b"content-type", b"application/json")])

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return  # lifespan events: nothing to set up
        method, path = scope["method"], scope["path"]
        if path == "/ping" and method == "GET":
            status = 200 if core.ready() else 503
            await respond(send, status, b"", [(b"content-type", b"text/plain")])
        elif path == "/invocations" and method == "POST":
            await answer_errors(send, path, invoke(scope, receive, send))
        elif path == "/models" or path.startswith("/models/"):
            await answer_errors(send, path, manage(scope, receive, send))
        else:
            message = f"no such endpoint: {method} {path}; SageMaker serves GET /ping, "
            await error(send, message + "POST /invocations and /models", 404)

    return app


def _binary_length(scope: Scope) -> Scope:
    """The scope with Inference-Header-Content-Length taken from SageMaker's content type
    when only that carries it."""
    headers = dict(scope["headers"])
    if HEADER_LENGTH_KEY not in headers and b"content-type" in headers:
        length = binary_header_length(headers[b"content-type"].decode("latin-1"))
        if length is not None:
            return {**scope, "headers": [*scope["headers"], (HEADER_LENGTH_KEY, length.encode())]}
    return scope
