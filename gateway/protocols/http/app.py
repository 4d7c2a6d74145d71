"""The V2 HTTP routes. Each one decodes, calls the Core (gateway/core/interface.py), and
encodes; nothing more."""

from __future__ import annotations

import logging
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from accel_base.config_json import config_to_json
from accel_base.errors import GatewayError, InvalidArgument
from gateway.core.interface import Core
from gateway.protocols.http import fields
from gateway.protocols.http.body import read_body
from gateway.protocols.http.codec import parse_json
from gateway.protocols.http.fields import brief, get_bool, get_string, non_negative_int
from gateway.protocols.http.openapi import OPENAPI_PATH, openapi_document

log = logging.getLogger(__name__)

JSON = "application/json"
SHM_BODY_LIMIT = 64 * 1024  # shared-memory calls carry a few fields, never tensors


LOG_SETTINGS_BYTES = 64 * 1024  # a logging or trace settings body is a handful of keys


def json_response(data: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(data), status_code=status, media_type=JSON)


def error_response(message: str, status: int) -> Response:
    return json_response({"error": message}, status)


def bearer_token(request: Request) -> str | None:
    value = request.headers.get("authorization", "")
    return value[7:] if value.lower().startswith("bearer ") else None


async def read_json(request: Request, limit: int) -> dict[str, Any]:
    declared = request.headers.get("content-length")
    body = await read_body(request.receive, declared.encode() if declared else None, limit)
    if not body.strip():
        return {}
    data = parse_json(body)
    if not isinstance(data, dict):
        raise InvalidArgument(f"the request body must be a JSON object, got {brief(data)}")
    return data


def create_app(core: Core, max_body_bytes: int = 64 * 1024 * 1024) -> FastAPI:
    app = FastAPI(title="accel-gateway", docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(GatewayError)
    async def gateway_error(_: Request, exc: GatewayError) -> Response:
        return error_response(exc.message, exc.http_status)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 404:
            return error_response(f"no such endpoint: {request.method} {request.url.path}", 404)
        if exc.status_code == 405:  # with Starlette's Allow header, which RFC 9110 requires
            response = error_response(f"{request.method} is not allowed on {request.url.path}", 405)
            response.headers.update(exc.headers or {})
            return response
        return error_response(str(exc.detail), exc.status_code)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> Response:
        return error_response(f"invalid request: {exc.errors()}", 400)

    @app.exception_handler(Exception)
    async def unexpected_error(request: Request, exc: Exception) -> Response:
        log.exception("unexpected error on %s", request.url.path)
        return error_response(f"internal error: {type(exc).__name__}: {exc}", 500)

    # ---- health and metadata ---------------------------------------------------------

    @app.get("/v2/health/live")
    async def live() -> Response:
        return Response(status_code=200 if core.live() else 503)

    @app.get("/v2/health/ready")
    async def ready() -> Response:
        return Response(status_code=200 if core.ready() else 503)

    @app.get(OPENAPI_PATH)
    async def openapi() -> Response:
        return json_response(openapi_document())

    @app.get("/v2")
    async def server_metadata() -> Response:
        return json_response(core.server_metadata())

    @app.get("/v2/logging")
    async def log_settings() -> Response:
        return json_response(await core.log_settings_dict())

    @app.post("/v2/logging")
    async def update_log_settings(request: Request) -> Response:
        changes = await read_json(request, LOG_SETTINGS_BYTES)
        return json_response(await core.update_log_settings(changes, bearer_token(request)))

    @app.get("/v2/trace/setting")
    @app.get("/v2/models/{name}/trace/setting")
    async def trace_settings(name: str = "") -> Response:
        return json_response(await core.trace_settings_dict(name))

    @app.post("/v2/trace/setting")
    @app.post("/v2/models/{name}/trace/setting")
    async def update_trace_settings(request: Request, name: str = "") -> Response:
        changes = await read_json(request, LOG_SETTINGS_BYTES)
        return json_response(await core.update_trace_settings(changes, name, bearer_token(request)))

    @app.get("/v2/models/stats")
    async def all_stats() -> Response:
        return json_response({"model_stats": await core.statistics()})

    @app.get("/v2/models/{name}")
    @app.get("/v2/models/{name}/versions/{version}")
    async def model_metadata(name: str, version: str = "") -> Response:
        return json_response(await core.model_metadata(name, version))

    @app.get("/v2/models/{name}/ready")
    @app.get("/v2/models/{name}/versions/{version}/ready")
    async def model_ready(name: str, version: str = "") -> Response:
        # Not ready says why: 404 unknown model or version, 400 malformed version, 503 not
        # (yet) ready. tritonclient's is_model_ready is False for any status but 200.
        await core.check_model_ready(name, version)
        return Response(status_code=200)

    @app.get("/v2/models/{name}/config")
    @app.get("/v2/models/{name}/versions/{version}/config")
    async def model_config(name: str, version: str = "") -> Response:
        return json_response(config_to_json(await core.model_config(name, version)))

    @app.get("/v2/models/{name}/stats")
    @app.get("/v2/models/{name}/versions/{version}/stats")
    async def model_stats(name: str, version: str = "") -> Response:
        return json_response({"model_stats": await core.statistics(name, version)})

    # POST .../infer is served by gateway.protocols.http.infer_route, in front of this app.

    # ---- repository ------------------------------------------------------------------

    @app.post("/v2/repository/index")
    async def repository_index(request: Request) -> Response:
        body = await read_json(request, max_body_bytes)
        ready_only = get_bool(body, "ready", "the index request")
        return json_response(await core.repository_index(ready_only))

    @app.post("/v2/repository/models/{name}/load")
    async def load(request: Request, name: str) -> Response:
        body = await read_json(request, max_body_bytes)
        parameters = fields.parameters(body, "the load request")
        await core.load_model(name, bearer_token(request), parameters)
        return Response(status_code=200)

    @app.post("/v2/repository/models/{name}/unload")
    async def unload(request: Request, name: str) -> Response:
        body = await read_json(request, max_body_bytes)
        parameters = fields.parameters(body, "the unload request")
        await core.unload_model(name, bearer_token(request), parameters)
        return Response(status_code=200)

    # ---- system shared memory --------------------------------------------------------
    # Triton's paths and bodies, so tritonclient and perf_analyzer work unchanged.

    @app.get("/v2/systemsharedmemory/status")
    @app.get("/v2/systemsharedmemory/region/{name}/status")
    async def shm_status(name: str = "") -> Response:
        return json_response(core.system_shared_memory_status(name))

    @app.post("/v2/systemsharedmemory/region/{name}/register")
    async def shm_register(request: Request, name: str) -> Response:
        body = await read_json(request, SHM_BODY_LIMIT)  # {"key", "offset", "byte_size"}
        where = "the register request"
        key = get_string(body, "key", where)
        offset = non_negative_int(body.get("offset", 0), f"{where}: 'offset'")
        byte_size = non_negative_int(body.get("byte_size"), f"{where}: 'byte_size'")
        token = bearer_token(request)
        await core.register_system_shared_memory(name, key, offset, byte_size, token)
        return Response(status_code=200)

    @app.post("/v2/systemsharedmemory/unregister")
    @app.post("/v2/systemsharedmemory/region/{name}/unregister")
    async def shm_unregister(request: Request, name: str = "") -> Response:
        await read_json(request, SHM_BODY_LIMIT)
        await core.unregister_system_shared_memory(name, bearer_token(request))
        return Response(status_code=200)

    # CUDA shared memory: registering is not supported; gateway/core/shared_memory_calls.py says
    # why the other two calls answer.

    @app.get("/v2/cudasharedmemory/status")
    @app.get("/v2/cudasharedmemory/region/{name}/status")
    async def cuda_status(name: str = "") -> Response:
        return json_response(core.cuda_shared_memory_status(name))

    @app.post("/v2/cudasharedmemory/region/{name}/register")
    async def cuda_register(name: str) -> Response:
        core.register_cuda_shared_memory()
        return Response(status_code=200)  # not reached

    @app.post("/v2/cudasharedmemory/unregister")
    @app.post("/v2/cudasharedmemory/region/{name}/unregister")
    async def cuda_unregister(request: Request, name: str = "") -> Response:
        await read_json(request, SHM_BODY_LIMIT)
        core.unregister_cuda_shared_memory(bearer_token(request))
        return Response(status_code=200)

    return app
