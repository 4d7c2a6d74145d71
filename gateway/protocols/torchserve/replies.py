"""What TorchServe's HTTP APIs (inference, management) share: its error JSON and the
exception names it puts in it, the headers on every answer, and token authorization."""

from __future__ import annotations

import orjson

from accel_base.errors import GatewayError, HandlerFailed
from accel_base.ids import uuid4_text
from gateway.protocols.http.infer_route import Scope, Send, respond, send_reply
from gateway.protocols.http.route import Reply
from gateway.protocols.torchserve.keys import KeyCheck

# TorchServe's exception names, by status.
_TYPES = {
    400: "BadRequestException", 404: "ModelNotFoundException", 405: "MethodNotAllowedException",
    408: "RequestTimeoutException", 409: "ConflictStatusException",
    413: "RequestTooLargeException", 503: "ServiceUnavailableException",
}  # fmt: skip
TOKEN_FAILED = (
    "Token Authorization failed. Token either incorrect, expired, or not provided correctly"
)
NOT_FOUND = "Requested resource is not found, please refer to API document."
NOT_ALLOWED = "Requested method is not allowed, please refer to API document."


class TsError(GatewayError):
    """A failure TorchServe names with a type of its own (the `type` of its error JSON)."""

    def __init__(self, status: int, message: str, kind: str | None = None) -> None:
        super().__init__(message)
        self.http_status = status
        self.kind = kind or _TYPES.get(status, "InternalServerException")


def kind_of(exc: GatewayError) -> str:
    return exc.kind if isinstance(exc, TsError) else _TYPES.get(exc.http_status, "")


def common_headers(request_id: str = "") -> list[tuple[bytes, bytes]]:
    """What TorchServe puts on every answer: the request's id and no caching."""
    return [
        (b"x-request-id", (request_id or uuid4_text()).encode()), (b"pragma", b"no-cache"),
        (b"cache-control", b"no-cache; no-store, must-revalidate, private"),
        (b"expires", b"Thu, 01 Jan 1970 00:00:00 UTC"),
    ]  # fmt: skip


def json_bytes(value: object) -> bytes:
    """Indented, and a newline after: TorchServe's bytes."""
    return orjson.dumps(value, option=orjson.OPT_INDENT_2) + b"\n"


async def ts_json(send: Send, status: int, value: object) -> None:
    headers = [(b"content-type", b"application/json"), *common_headers()]
    await respond(send, status, json_bytes(value), headers)


def error_reply(
    status: int, message: str, retry_after_s: int | None = None, kind: str | None = None
) -> Reply:
    """TorchServe's error JSON, with its exception name for `status` unless `kind`."""
    kind = kind or _TYPES.get(status, "InternalServerException")
    body = json_bytes({"code": status, "type": kind, "message": message})
    headers = [(b"content-type", b"application/json"), *common_headers()]
    if retry_after_s is not None:
        headers.append((b"retry-after", str(retry_after_s).encode()))
    return Reply(status, headers, body)


async def ts_error(
    send: Send, status: int, message: str, retry_after_s: int | None = None,
    kind: str | None = None,
) -> None:  # fmt: skip
    await send_reply(send, error_reply(status, message, retry_after_s, kind))


def authorized(scope: Scope, keys: KeyCheck | None, kind: str) -> bool:
    """TorchServe's token authorization: `Authorization: Bearer <the key of `kind`>`;
    `keys` None: off."""
    return authorized_headers(scope["headers"], keys, kind)


def authorized_headers(
    headers: list[tuple[bytes, bytes]], keys: KeyCheck | None, kind: str
) -> bool:
    """authorized() for a request's headers."""
    return keys is None or keys.check(kind, dict(headers).get(b"authorization"))


def failure_reply(exc: Exception) -> Reply:
    """Any failure as TorchServe's error JSON: a handler's as TorchServe names it, ours with
    its status, anything else a 500 that says what it was."""
    if isinstance(exc, HandlerFailed):
        return error_reply(exc.http_status, exc.detail, kind="InternalServerException")
    if isinstance(exc, TsError):
        return error_reply(exc.http_status, exc.message, kind=exc.kind)
    if isinstance(exc, GatewayError):
        return error_reply(exc.http_status, exc.message, exc.retry_after_s, kind_of(exc))
    return error_reply(500, f"internal error: {type(exc).__name__}: {exc}")


async def reply_failure(send: Send, exc: Exception) -> None:
    await send_reply(send, failure_reply(exc))
