"""SageMaker's inference-container contract, on its own port (8080).

- `GET /ping`: 200 once the server has started, else 503 (SageMaker's health check).
- `POST /invocations`: a V2 infer body, JSON or the binary tensor extension, exactly as
  `POST /v2/models/<name>/infer` takes it. A multi-model endpoint names the model in the
  `X-Amzn-SageMaker-Target-Model` header (the artifact's path, e.g. `digits.tar.gz`;
  its file name without the archive suffix is the repository's model name), and that
  model is loaded from the repository on its first request. Without the header, the one
  model the server has ready answers.
"""

from __future__ import annotations

import logging
from pathlib import PurePosixPath

from gateway.core import InferenceCore
from gateway.errors import InvalidArgument, NotFound
from gateway.http.infer_route import (
    ASGIApp,
    Receive,
    Scope,
    Send,
    answer_errors,
    error,
    respond,
    serve_infer,
)

log = logging.getLogger(__name__)

TARGET_MODEL_HEADER = b"x-amzn-sagemaker-target-model"
_ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".zip")


def model_name_of(target: str) -> str:
    """`models/digits.tar.gz` -> `digits`: the repository name of a target model."""
    name = PurePosixPath(target.strip()).name
    for suffix in _ARCHIVE_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def create_sagemaker_app(core: InferenceCore, max_body_bytes: int) -> ASGIApp:
    async def resolve_model(scope: Scope) -> str:
        target = dict(scope["headers"]).get(TARGET_MODEL_HEADER)
        if target is None:
            ready = sorted({model.name for model in core.repository.ready_models()})
            if len(ready) != 1:
                raise InvalidArgument(
                    f"{len(ready)} models are ready ({', '.join(ready) or 'none'}); name one "
                    "with the X-Amzn-SageMaker-Target-Model header"
                )
            return ready[0]
        name = model_name_of(target.decode("latin-1"))
        if not name or name.startswith(".") or name not in _repository_names(core):
            raise NotFound(
                f"target model '{target.decode('latin-1')}' is not in the model repository"
            )
        if not core.model_ready(name):
            log.info("loading model '%s' for its first SageMaker invocation", name)
            await core.repository.load(name)
        return name

    async def invoke(scope: Scope, receive: Receive, send: Send) -> None:
        name = await resolve_model(scope)
        await serve_infer(core, max_body_bytes, scope, receive, send, name, "")

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return  # lifespan events: nothing to set up
        method, path = scope["method"], scope["path"]
        if path == "/ping" and method == "GET":
            status = 200 if core.ready() else 503
            await respond(send, status, b"", [(b"content-type", b"text/plain")])
        elif path == "/invocations" and method == "POST":
            await answer_errors(send, path, invoke(scope, receive, send))
        else:
            message = f"no such endpoint: {method} {path}; SageMaker serves GET /ping, "
            await error(send, message + "POST /invocations", 404)

    return app


def _repository_names(core: InferenceCore) -> set[str]:
    return {entry["name"] for entry in core.repository_index()}
