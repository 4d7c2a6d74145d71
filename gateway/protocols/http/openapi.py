"""The OpenAPI 3.1 document of the V2 HTTP routes, served at GET /v2/openapi.json.

Written by hand: FastAPI would describe only the routes it owns (not POST .../infer, which
gateway.protocols.http.infer_route serves in front of it) and knows nothing of the bodies that the
handlers parse themselves, so its own /openapi.json and /docs are off. The test
tests/gateway/protocols/http/test_openapi.py checks that every route the app serves is here and
nothing else is; tests/fuzz/ sends requests generated from this document.
"""

from __future__ import annotations

import functools
from typing import Any

from gateway import SERVER_NAME, __version__
from gateway.protocols.http.openapi_schemas import SCHEMAS, Schema, ref

OPENAPI_PATH = "/v2/openapi.json"


def _json(schema: Schema) -> Schema:
    return {"application/json": {"schema": schema}}


def _error(description: str) -> Schema:
    return {"description": description, "content": _json(ref("Error"))}


_OK = {"description": "Done (no body)."}
_BAD = _error("Malformed request: the message names the field and what was expected.")
_NOT_FOUND = _error("Unknown model or version.")
_NOT_READY = _error("The model exists but is not ready (loading, failed, or restarting).")
_FORBIDDEN = _error("The control mode, a server flag or the admin token forbids the call.")
_TOO_LARGE = _error("The body is over the server's --max-request-bytes.")

_NAME = {
    "name": "name",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "minLength": 1, "pattern": "^[^/]+$"},
}
_VERSION = {
    "name": "version",
    "in": "path",
    "required": True,
    "description": "A version number; anything else is a 400.",
    "schema": {"type": "string", "pattern": "^[0-9]+$"},
}
_REGION = {**_NAME, "description": "The name the region was registered under."}


def _get(summary: str, ok: Schema, *errors: tuple[str, Schema]) -> Schema:
    return {"get": {"summary": summary, "responses": {"200": ok, **dict(errors)}}}


def _post(summary: str, ok: Schema, body: Schema | None, *errors: tuple[str, Schema]) -> Schema:
    operation: Schema = {"summary": summary, "responses": {"200": ok, **dict(errors)}}
    if body is not None:
        operation["requestBody"] = {"required": False, "content": _json(body)}
    return {"post": operation}


def _with_params(item: Schema, params: list[Schema]) -> Schema:
    return {method: {**op, "parameters": params} for method, op in item.items()}


def _model_routes(suffix: str, item: Schema) -> dict[str, Schema]:
    """/v2/models/{name}<suffix> and /v2/models/{name}/versions/{version}<suffix>."""
    name = _NAME
    if suffix == "":  # /v2/models/stats is the statistics of every model, not a model's
        name = {**_NAME, "schema": {**_NAME["schema"], "not": {"const": "stats"}}}
    return {
        f"/v2/models/{{name}}{suffix}": _with_params(item, [name]),
        f"/v2/models/{{name}}/versions/{{version}}{suffix}": _with_params(item, [name, _VERSION]),
    }


def _infer() -> Schema:
    headers = [
        {
            "name": "Inference-Header-Content-Length",
            "in": "header",
            "required": False,
            "description": "Binary tensor extension: the length of the JSON part of the body.",
            "schema": {"type": "integer", "minimum": 0},
        },
        {
            "name": "Content-Encoding",
            "in": "header",
            "required": False,
            "schema": {"type": "string", "enum": ["gzip", "deflate", "identity"]},
        },
    ]
    binary = {
        "schema": {"type": "string", "format": "binary"},
        "description": "The JSON request, then the inputs' bytes back to back.",
    }
    ok = {
        "description": "The outputs, as JSON or (binary_data) JSON followed by their bytes.",
        "headers": {"Inference-Header-Content-Length": {"schema": {"type": "integer"}}},
        "content": {**_json(ref("InferResponse")), "application/octet-stream": binary},
    }
    operation = {
        "summary": "Run inference (JSON, or the binary tensor extension)",
        "parameters": headers,
        "requestBody": {
            "required": True,
            "content": {**_json(ref("InferRequest")), "application/octet-stream": binary},
        },
        "responses": {
            "200": ok,
            "400": _BAD,
            "404": _NOT_FOUND,
            "413": _TOO_LARGE,
            "500": _error("The model's backend failed on this request."),
            "503": _error("The model is not ready, or its queue is full."),
        },
    }
    return {"post": operation}


def _generate(stream: bool) -> Schema:
    """Triton's generate extension (gateway/protocols/http/generate.py)."""
    body = {"type": "object", "description": "Inputs by name, `parameters`, scalar parameters."}
    answer = {"type": "object", "required": ["model_name", "model_version"]}
    ok = {
        "description": "One `data:` event a response" if stream else "The outputs by name.",
        "content": {"text/event-stream": {"schema": {"type": "string"}}}
        if stream
        else _json(answer),
    }
    summary = "Generate, a response an event (SSE)" if stream else "Generate: one response"
    failed = _error("The model's backend failed on this request.")
    errors = [("400", _BAD), ("404", _NOT_FOUND), ("413", _TOO_LARGE), ("500", failed)]
    return _post(summary, ok, body, *errors, ("503", _NOT_READY))


def _answer(description: str, schema: str) -> Schema:
    return {"description": description, "content": _json(ref(schema))}


def _paths() -> dict[str, Schema]:
    no = ("503", {"description": "No (no body)."})
    model_errors = (("400", _BAD), ("404", _NOT_FOUND), ("503", _NOT_READY))
    post_errors = (("400", _BAD), ("403", _FORBIDDEN), ("413", _TOO_LARGE))
    index_body = {"type": "object", "properties": {"ready": {"type": ["boolean", "null"]}}}
    load_body = {
        "type": "object",
        "properties": {
            "parameters": {
                **ref("Parameters"),
                "description": "'config': a JSON string overriding the model's config.",
            }
        },
    }
    register_body = {
        "type": "object",
        "required": ["key", "byte_size"],
        "properties": {
            "key": {"type": "string"},
            "offset": {"type": "integer", "minimum": 0},
            "byte_size": {"type": "integer", "minimum": 0},
        },
    }
    shm = _answer("The regions.", "SystemSharedMemoryStatus")
    cuda = _answer("An empty list.", "CudaSharedMemoryStatus")
    cuda_register = {
        "post": {
            "summary": "Not supported: use system shared memory",
            "responses": {"501": _error("CUDA shared memory is not supported by this server.")},
        }
    }
    trace_get = (_answer("The settings in force.", "TraceSettings"), ("404", _NOT_FOUND))
    trace_post = (
        _answer("The settings after the change.", "TraceSettings"),
        ref("TraceSettingsChange"),
        *post_errors,
        ("404", _NOT_FOUND),
    )
    trace = {
        **_get("The server's trace settings", *trace_get),
        **_post("Change the server's trace settings (the admin token when one is set)",
                *trace_post),
    }  # fmt: skip
    return {
        "/v2/health/live": _get("Is the server live", _OK, no),
        "/v2/health/ready": _get("Is the server ready", _OK, no),
        "/v2": _get("Server metadata", _answer("Name, version, extensions.", "ServerMetadata")),
        OPENAPI_PATH: _get(
            "This document", {"description": "OpenAPI 3.1", "content": _json({"type": "object"})}
        ),
        "/v2/logging": {
            **_get("The logging settings", _answer("The settings.", "LogSettings")),
            **_post(
                "Change logging settings (the admin token when one is set)",
                _answer("The settings after the change.", "LogSettings"),
                ref("LogSettings"),
                *post_errors,
            ),
        },
        "/v2/trace/setting": trace,
        "/v2/models/{name}/trace/setting": _with_params(
            {
                **_get("A model's trace settings", *trace_get),
                **_post("Change a model's trace settings (null clears one)", *trace_post),
            },
            [_NAME],
        ),
        "/v2/models/stats": _get(
            "Statistics of every ready model", _answer("One entry per version.", "ModelStatistics")
        ),
        **_model_routes(
            "", _get("Model metadata", _answer("Its tensors.", "ModelMetadata"), *model_errors)
        ),
        **_model_routes("/ready", _get("Is the model (version) ready", _OK, *model_errors)),
        **_model_routes(
            "/config",
            _get("Model configuration", _answer("Its config.", "ModelConfig"), *model_errors),
        ),
        **_model_routes(
            "/stats",
            _get("Model statistics", _answer("Its counts.", "ModelStatistics"), *model_errors),
        ),
        **_model_routes("/infer", _infer()),
        **_model_routes("/generate", _generate(stream=False)),
        **_model_routes("/generate_stream", _generate(stream=True)),
        "/v2/repository/index": _post(
            "The models of the repository and their states",
            _answer("One row per model version.", "RepositoryIndex"),
            index_body,
            ("400", _BAD),
            ("413", _TOO_LARGE),
        ),
        "/v2/repository/models/{name}/load": _with_params(
            _post(
                "Load or reload a model (explicit control mode)",
                _OK,
                load_body,
                *post_errors,
                ("404", _NOT_FOUND),
                ("503", _error("The model failed to load; the message says why.")),
            ),
            [_NAME],
        ),
        "/v2/repository/models/{name}/unload": _with_params(
            _post("Unload a model", _OK, load_body, *post_errors, ("404", _NOT_FOUND)), [_NAME]
        ),
        "/v2/systemsharedmemory/status": _get("Registered system shared-memory regions", shm),
        "/v2/systemsharedmemory/region/{name}/status": _with_params(
            _get("One region", shm, ("400", _BAD)), [_REGION]
        ),
        "/v2/systemsharedmemory/region/{name}/register": _with_params(
            _post(
                "Register a region (needs --allow-shared-memory)",
                _OK,
                register_body,
                *post_errors,
                ("503", _error("The server cannot open more files.")),
            ),
            [_REGION],
        ),
        "/v2/systemsharedmemory/unregister": _post(
            "Unregister every region", _OK, {"type": "object"}, *post_errors
        ),
        "/v2/systemsharedmemory/region/{name}/unregister": _with_params(
            _post("Unregister a region", _OK, {"type": "object"}, *post_errors), [_REGION]
        ),
        "/v2/cudasharedmemory/status": _get("CUDA shared-memory regions (never any)", cuda),
        "/v2/cudasharedmemory/region/{name}/status": _with_params(
            _get("One CUDA region (never registered)", cuda, ("400", _BAD)), [_REGION]
        ),
        "/v2/cudasharedmemory/region/{name}/register": _with_params(cuda_register, [_REGION]),
        "/v2/cudasharedmemory/unregister": _post(
            "Unregister every CUDA region (there are none)", _OK, {"type": "object"}, *post_errors
        ),
        "/v2/cudasharedmemory/region/{name}/unregister": _with_params(
            _post("Unregister a CUDA region (none exist)", _OK, {"type": "object"}, *post_errors),
            [_REGION],
        ),
    }


_SLOW = _error("The request did not arrive whole within the server's --read-timeout.")


def _with_transport_answers(paths: dict[str, Schema]) -> dict[str, Schema]:
    """Every operation may also time out while its request arrives
    (gateway.protocols.http.timeouts)."""
    for item in paths.values():
        for operation in item.values():
            operation["responses"].setdefault("408", _SLOW)
    return paths


@functools.cache
def openapi_document() -> dict[str, Any]:
    """The document; built once, since it never changes while the server runs."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": SERVER_NAME,
            "version": __version__,
            "description": (
                "The KServe V2 / Open Inference Protocol over HTTP, as Triton Inference Server "
                'serves it. Every error is {"error": message}. Besides the answers listed, '
                "any call may get 503 while the server drains or is over --max-connections "
                "(uvicorn answers the latter in plain text)."
            ),
        },
        "paths": _with_transport_answers(_paths()),
        "components": {"schemas": SCHEMAS},
    }
