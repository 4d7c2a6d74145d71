"""TorchServe's management API over HTTP, on its own port (8081 by default, as TorchServe's):

    GET    /models[?limit=N&next_page_token=T]          list
    POST   /models?url=...[&model_name&initial_workers&batch_size&max_batch_delay
                           &handler&synchronous&response_timeout]   register
    GET    /models/{name}[/{version}|/all][?customized=true]        describe
    PUT    /models/{name}[/{version}]?min_worker=N[&max_worker&synchronous]   scale
    DELETE /models/{name}[/{version}]                   unregister
    PUT    /models/{name}/{version}/set-default         set the default version

The operations are management.py's; this maps routes and query strings onto them.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, unquote

from gateway.protocols.http.infer_route import ASGIApp, Receive, Scope, Send, respond
from gateway.protocols.torchserve.keys import KINDS, KeyCheck, Keys
from gateway.protocols.torchserve.management import Management, Reply
from gateway.protocols.torchserve.openapi import MANAGEMENT, description
from gateway.protocols.torchserve.replies import (
    NOT_ALLOWED,
    NOT_FOUND,
    TOKEN_FAILED,
    TsError,
    authorized,
    common_headers,
    reply_failure,
    ts_error,
    ts_json,
)

# What a registration or a scale may name; any other parameter is refused by name.
REGISTER_PARAMS = {
    "url", "model_name", "initial_workers", "batch_size", "max_batch_delay", "handler",
    "synchronous", "response_timeout", "runtime", "startup_timeout", "s3_sse_kms",
}  # fmt: skip
SCALE_PARAMS = {"min_worker", "max_worker", "number_gpu", "synchronous", "timeout"}


def _params(scope: Scope, allowed: set[str]) -> dict[str, str]:
    params = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
    unknown = sorted(set(params) - allowed)
    if unknown:
        raise TsError(
            400, f"Unknown parameter(s): {', '.join(unknown)}; expected some of "
            f"{', '.join(sorted(allowed))}",
        )  # fmt: skip
    return params


async def route(management: Management, scope: Scope) -> Reply:
    method = scope["method"]
    parts = [unquote(p) for p in scope["path"].strip("/").split("/")]
    if parts[0] != "models" or len(parts) > 4:
        raise TsError(404, NOT_FOUND, "ResourceNotFoundException")
    if len(parts) == 1:
        if method == "GET":
            params = _params(scope, {"limit", "next_page_token"})
            return await management.list(params.get("limit"), params.get("next_page_token"))
        if method == "POST":
            return await management.register(_params(scope, REGISTER_PARAMS))
        raise TsError(405, NOT_ALLOWED, "MethodNotAllowedException")
    name = parts[1]
    version = parts[2] if len(parts) >= 3 else ""
    if len(parts) == 4:
        if parts[3] != "set-default":
            raise TsError(404, NOT_FOUND, "ResourceNotFoundException")
        if method != "PUT":
            raise TsError(405, NOT_ALLOWED, "MethodNotAllowedException")
        return await management.set_default(name, version)
    if method == "GET":
        params = _params(scope, {"customized"})
        customized = params.get("customized", "false").lower() == "true"
        return await management.describe(name, version, customized)
    if method == "PUT":
        return await management.scale(name, version, _params(scope, SCALE_PARAMS))
    if method == "DELETE":
        return await management.unregister(name, version)
    raise TsError(405, NOT_ALLOWED, "MethodNotAllowedException")


TOKEN_API_FAILED = TOKEN_FAILED.replace("Authorization", "Authentication")  # its words


async def renew_key(scope: Scope, keys: KeyCheck | None) -> Reply:
    """`POST /token?type=management|inference` with the API key: a new key of that type."""
    if not isinstance(keys, Keys):
        raise TsError(404, NOT_FOUND, "ResourceNotFoundException")  # no keys: no token API
    if not keys.check("API", dict(scope["headers"]).get(b"authorization")):
        raise TsError(400, TOKEN_API_FAILED, "InvalidKeyException")
    kind = _params(scope, {"type"}).get("type", "")
    if kind not in KINDS:
        raise TsError(400, f"type must be one of {', '.join(KINDS)}, not '{kind}'")
    keys.renew(kind)
    return 200, None


def create_management_app(management: Management, keys: KeyCheck | None = None) -> ASGIApp:
    """`keys`: whose management key clients must send (key_file.json's, or the admin
    token); None: none."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        try:
            if scope["method"] == "OPTIONS" and scope["path"] in ("", "/"):
                await ts_json(send, 200, description("TorchServe management API", MANAGEMENT))
                return
            if scope["path"] == "/token" and scope["method"] == "POST":
                await renew_key(scope, keys)
                await respond(send, 200, b"\n", [(b"content-type", b"application/json"),
                                                 *common_headers()])  # fmt: skip
                return
            if not authorized(scope, keys, "management"):
                await ts_error(send, 400, TOKEN_FAILED, kind="InvalidKeyException")
                return
            status, answer = await route(management, scope)
            await ts_json(send, status, answer)
        except Exception as exc:
            await reply_failure(send, exc)

    return app
