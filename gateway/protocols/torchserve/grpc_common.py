"""What TorchServe's two gRPC services share: its status codes and details for a failure,
its token authorization, and the handler's input fields of a PredictionsRequest.

TorchServe (0.12) answers a failure with a gRPC code and the details "<message>\\n<the
Java exception's class>"; the codes are its own table of HTTP statuses (`grpc_code`),
except where it chose one for a case: a prediction refused before its handler runs (an
unknown model or version, no worker) is INTERNAL, the model API being off is
PERMISSION_DENIED, and so is a call without the right key (details: the message alone).
Where TorchServe's own answer is a bug (UNKNOWN, no details: a registration of a version
already there, an unregistration of the default version), the table's code is given with
the message.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import grpc

from accel_base.errors import GatewayError, HandlerFailed, InvalidArgument
from gateway.protocols.torchserve.keys import KeyCheck
from gateway.protocols.torchserve.replies import TOKEN_FAILED, TsError

# Who may call: the server's Keys (the live ones: POST /token renews them, and they
# expire), the admin token (AdminKey, for management), or None (no key asked for).
Auth = KeyCheck | None

# TorchServe's HTTP status -> gRPC code (its GRPCUtils); other 4xx FAILED_PRECONDITION,
# other 5xx INTERNAL.
_CODES = {
    400: grpc.StatusCode.INVALID_ARGUMENT, 401: grpc.StatusCode.UNAUTHENTICATED,
    403: grpc.StatusCode.PERMISSION_DENIED, 404: grpc.StatusCode.NOT_FOUND,
    409: grpc.StatusCode.ABORTED, 413: grpc.StatusCode.RESOURCE_EXHAUSTED,
    416: grpc.StatusCode.OUT_OF_RANGE, 429: grpc.StatusCode.RESOURCE_EXHAUSTED,
    499: grpc.StatusCode.CANCELLED, 501: grpc.StatusCode.UNIMPLEMENTED,
    503: grpc.StatusCode.UNAVAILABLE, 504: grpc.StatusCode.DEADLINE_EXCEEDED,
}  # fmt: skip
# The exceptions TorchServe names that live outside org.pytorch.serve.http, by package.
_PACKAGES = {
    "ModelNotFoundException": "archive.model", "ModelVersionNotFoundException": "archive.model",
    "ModelException": "archive.model", "InvalidKeyException": "archive.model",
    "DownloadArchiveException": "archive",
}  # fmt: skip
HANDLER_FAILED = "org.pytorch.serve.http.InternalServerException"  # a handler's failure
NO_MODEL_NAME = "Parameter model_name is required."


def grpc_code(http_status: int) -> grpc.StatusCode:
    if http_status in _CODES:
        return _CODES[http_status]
    if 200 <= http_status < 300:
        return grpc.StatusCode.OK
    if 400 <= http_status < 500:
        return grpc.StatusCode.FAILED_PRECONDITION
    return grpc.StatusCode.INTERNAL if 500 <= http_status < 600 else grpc.StatusCode.UNKNOWN


def java_class(kind: str) -> str:
    """The full name of the TorchServe exception TsError.kind names."""
    return f"org.pytorch.serve.{_PACKAGES.get(kind, 'http')}.{kind}"


@dataclass(frozen=True)
class Failure:
    code: grpc.StatusCode
    message: str
    reason: str  # the exception TorchServe names (StreamPredictions2's ErrorInfo.reason)

    @property
    def details(self) -> str:
        return f"{self.message}\n{self.reason}" if self.reason else self.message


def _general(exc: Exception) -> Failure:
    if isinstance(exc, HandlerFailed):
        return Failure(grpc_code(exc.http_status), exc.detail, HANDLER_FAILED)
    if isinstance(exc, TsError):
        return Failure(grpc_code(exc.http_status), exc.message, java_class(exc.kind))
    if isinstance(exc, GatewayError):
        return Failure(grpc_code(exc.http_status), exc.message, HANDLER_FAILED)
    text = f"internal error: {type(exc).__name__}: {exc}"
    return Failure(grpc.StatusCode.INTERNAL, text, HANDLER_FAILED)


def inference_failure(exc: Exception) -> Failure:
    """A prediction's failure as TorchServe reports it over gRPC."""
    if isinstance(exc, TsError):  # refused before the handler: unknown model, no worker
        return Failure(grpc.StatusCode.INTERNAL, exc.message, java_class(exc.kind))
    return _general(exc)


def management_failure(exc: Exception) -> Failure:
    """A management call's failure as TorchServe reports it over gRPC."""
    if isinstance(exc, TsError) and exc.http_status == 405:  # the model API is off
        return Failure(grpc.StatusCode.PERMISSION_DENIED, exc.message, java_class("ModelException"))
    return _general(exc)


def token_refusal(
    metadata: Iterable[tuple[str, str | bytes]] | None, auth: Auth, kind: str
) -> Failure | None:
    """TorchServe's gRPC token authorization: metadata `authorization: Bearer <the key of
    kind>` ("inference" or "management"), else PERMISSION_DENIED. None: the call may go on."""
    if auth is None:
        return None
    for name, value in metadata or ():
        if name == "authorization" and auth.check(kind, value):
            return None
    return Failure(grpc.StatusCode.PERMISSION_DENIED, TOKEN_FAILED, reason="")


def form_body(inputs: Mapping[str, bytes]) -> tuple[bytes, str]:
    """A PredictionsRequest's `input` map as a multipart/form-data body and its content
    type: the backend makes each part an input field of its name with no content type,
    as TorchServe's frontend makes each entry of the map (backends/torchserve/forms.py)."""
    if not inputs:
        raise InvalidArgument(
            "PredictionsRequest.input is empty: give the handler at least one input "
            "(a name and its bytes)"
        )
    for name in inputs:
        if any(c in name for c in "\r\n\0"):
            raise InvalidArgument(
                f"input name {name!r}: a name must not hold CR, LF or NUL (it becomes a "
                "form field's name)"
            )
    boundary = secrets.token_hex(16).encode()
    while any(boundary in value for value in inputs.values()):  # a delimiter never in a value
        boundary = secrets.token_hex(16).encode()
    parts = []
    for name, value in inputs.items():
        quoted = name.replace("\\", "\\\\").replace('"', '\\"').encode()
        parts += [
            b"--", boundary, b'\r\nContent-Disposition: form-data; name="', quoted,
            b'"\r\n\r\n', value, b"\r\n",
        ]  # fmt: skip
    parts += [b"--", boundary, b"--\r\n"]
    return b"".join(parts), f"multipart/form-data; boundary={boundary.decode()}"
