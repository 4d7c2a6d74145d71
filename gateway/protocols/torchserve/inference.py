"""TorchServe's inference API, on its own port (8080 by default, as TorchServe's).

- `GET /ping`: {"status": "Healthy"} (500 {"status": "Unhealthy"} before the server is up).
- `POST` or `PUT /predictions/{model}[/{version}]`: the body, its content type, the request's
  headers (a form body's fields by name) go to the model's handler (a TorchServe archive's:
  backends/torchserve/backend.py) as TorchServe's frontend sends them; the answer is
  the handler's bytes with the status, content type and headers it set.

Errors are TorchServe's JSON, {"code": ..., "type": ..., "message": ...}.
"""

from __future__ import annotations

import hmac
import json
import uuid
from urllib.parse import unquote

import numpy as np
import orjson

from accel_base.errors import GatewayError, HandlerFailed, InvalidArgument, NotFound
from backends.torchserve import BODY, MODEL_VERSION, RESPONSE, RESPONSE_INFO
from gateway.core.inference import InferRequest, RequestedOutput, Tensor
from gateway.core.interface import Core
from gateway.protocols.http.body import read_body
from gateway.protocols.http.infer_route import ASGIApp, Receive, Scope, Send, respond

# TorchServe's exception names, by status.
_TYPES = {
    400: "BadRequestException", 404: "ModelNotFoundException", 405: "MethodNotAllowedException",
    408: "RequestTimeoutException", 413: "RequestTooLargeException",
    503: "ServiceUnavailableException",
}  # fmt: skip


def common_headers(request_id: str = "") -> list[tuple[bytes, bytes]]:
    """What TorchServe puts on every answer: the request's id and no caching."""
    return [
        (b"x-request-id", (request_id or str(uuid.uuid4())).encode()), (b"pragma", b"no-cache"),
        (b"cache-control", b"no-cache; no-store, must-revalidate, private"),
        (b"expires", b"Thu, 01 Jan 1970 00:00:00 UTC"),
    ]  # fmt: skip


async def ts_error(
    send: Send, status: int, message: str, retry_after_s: int | None = None,
    kind: str | None = None,
) -> None:  # fmt: skip
    kind = kind or _TYPES.get(status, "InternalServerException")
    body = (
        orjson.dumps(  # indented, and a newline after: TorchServe's bytes
            {"code": status, "type": kind, "message": message}, option=orjson.OPT_INDENT_2
        )
        + b"\n"
    )
    headers = [(b"content-type", b"application/json"), *common_headers()]
    if retry_after_s is not None:
        headers.append((b"retry-after", str(retry_after_s).encode()))
    await respond(send, status, body, headers)


class VersionNotFound(NotFound):
    """TorchServe answers an unknown version with a type of its own."""


class ModelNotFound(NotFound):
    """An unknown model, in TorchServe's words."""


MAX_HEADER_BYTES = 8192


def authorized(scope: Scope, token: str | None) -> bool:
    """TorchServe's token authorization: `Authorization: Bearer <the inference key>`."""
    if token is None:
        return True
    given = dict(scope["headers"]).get(b"authorization", b"")
    scheme, _, key = given.partition(b" ")
    return scheme.lower() == b"bearer" and hmac.compare_digest(key.strip(), token.encode())


def create_inference_app(core: Core, max_body_bytes: int, token: str | None = None) -> ASGIApp:
    """`token`: the inference key clients must send (key_file.json's); None: none."""

    async def resolve_version(name: str, version: str) -> str:
        """TorchServe's version ("1.0", as the archive's manifest has it) as the
        repository's: an archive is version 1 there, and a plain model's numbers stand."""
        if not version:
            return ""
        config = await core.model_config(name)
        if MODEL_VERSION not in config.parameters:
            return version
        if config.parameters[MODEL_VERSION].string_value == version:
            return ""
        raise VersionNotFound(f"Model version: {version} does not exist for model: {name}")

    async def predict(scope: Scope, receive: Receive, send: Send, name: str, version: str):
        core.shedder.check()
        headers = scope["headers"]
        named = dict(headers)
        body = await read_body(receive, named.get(b"content-length"), max_body_bytes)
        content_type = named.get(b"content-type", b"").decode("latin-1")
        request_headers = json.dumps(
            [(k.decode("latin-1"), v.decode("latin-1")) for k, v in headers]
        )
        if len(request_headers) > MAX_HEADER_BYTES:  # they travel with the batch
            raise InvalidArgument(
                f"the request's headers come to {len(request_headers)} bytes, over "
                f"{MAX_HEADER_BYTES} (TorchServe's frontend allows 8 KiB); send fewer"
            )
        data = np.empty((1, 1), dtype=object)
        data[0, 0] = body
        try:
            request = InferRequest(
                model_name=name,
                model_version=await resolve_version(name, version),
                id=str(uuid.uuid4()),  # the handler's request id and x-request-id
                parameters={
                    # Whole, with its parameters: a form's boundary is one of them (the
                    # backend makes the inputs of the body as TorchServe's frontend does).
                    "content_type": content_type,
                    "request_headers": request_headers,
                },
                inputs=[Tensor(BODY, "BYTES", data)],
                outputs=[RequestedOutput(RESPONSE), RequestedOutput(RESPONSE_INFO)],
            )
            response = await core.infer(request)
        except VersionNotFound:
            raise
        except NotFound:
            raise ModelNotFound(f"Model not found: {name}") from None
        produced = {t.name: t.data for t in response.outputs}
        if RESPONSE not in produced or RESPONSE_INFO not in produced:
            raise InvalidArgument(
                f"model '{name}' is not a TorchServe archive's (it has no outputs "
                f"{RESPONSE} and {RESPONSE_INFO}); call it over the V2 protocol"
            )
        answer = produced[RESPONSE].reshape(-1)[0]
        info = json.loads(produced[RESPONSE_INFO].reshape(-1)[0])
        # The handler's headers (set_response_content_type is one of them), else its
        # content type as the answer carries it.
        set_headers = {k.lower(): v for k, v in info["headers"].items()}
        if info["content_type"] and "content-type" not in set_headers:
            set_headers["content-type"] = info["content_type"]
        reply = [(k.encode("latin-1", "replace"), v.encode("latin-1", "replace"))
                 for k, v in set_headers.items()]  # fmt: skip
        reply += common_headers(request.id)
        await respond(send, info["status"], bytes(answer), reply)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        method, parts = scope["method"], scope["path"].strip("/").split("/")
        try:
            if parts == ["ping"] and method == "GET":
                healthy = core.ready()
                body = (
                    orjson.dumps(
                        {"status": "Healthy" if healthy else "Unhealthy"},
                        option=orjson.OPT_INDENT_2,
                    )
                    + b"\n"
                )
                await respond(
                    send, 200 if healthy else 500, body, [(b"content-type", b"application/json")]
                )
            elif not authorized(scope, token):
                message = (
                    "Token Authorization failed. Token either incorrect, expired, or not "
                    "provided correctly"
                )
                await ts_error(send, 400, message, kind="InvalidKeyException")
            elif parts[0] == "predictions" and 2 <= len(parts) <= 3:
                if method not in ("GET", "POST", "PUT"):  # TorchServe takes all three
                    await ts_error(send, 405, f"{method} is not allowed on predictions")
                    return
                name = unquote(parts[1])
                version = unquote(parts[2]) if len(parts) == 3 else ""
                await predict(scope, receive, send, name, version)
            else:
                await ts_error(
                    send, 404, "Requested resource is not found, please refer to API document."
                )
        except HandlerFailed as exc:  # TorchServe names every handler failure so
            await ts_error(send, exc.http_status, exc.detail, kind="InternalServerException")
        except VersionNotFound as exc:
            await ts_error(send, 404, exc.message, kind="ModelVersionNotFoundException")
        except GatewayError as exc:
            await ts_error(send, exc.http_status, exc.message, exc.retry_after_s)
        except Exception as exc:
            await ts_error(send, 500, f"internal error: {type(exc).__name__}: {exc}")

    return app
