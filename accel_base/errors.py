"""Errors that reach a client, each with its HTTP status and gRPC status code.

Everything below the fronts raises these; the fronts turn them into
`{"error": "..."}` bodies (HTTP) or status details (gRPC) with Triton's mapping.
The gRPC status is kept by name (grpc.StatusCode's member) so that this module,
which worker processes import, does not import grpc.
"""

from __future__ import annotations


class GatewayError(Exception):
    """A failure to report to the client as it is; the message names what went wrong."""

    http_status = 500
    grpc_status = "INTERNAL"
    retry_after_s: int | None = None  # a hint to retry after so many seconds (overload)

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidArgument(GatewayError):
    """The request is malformed or does not match the model (shape, datatype, size)."""

    http_status = 400
    grpc_status = "INVALID_ARGUMENT"


class NotFound(GatewayError):
    """The model, version or endpoint does not exist."""

    http_status = 404
    grpc_status = "NOT_FOUND"


class Unavailable(GatewayError):
    """The model exists but cannot serve now (not ready, queue full, shutting down)."""

    http_status = 503
    grpc_status = "UNAVAILABLE"


class PayloadTooLarge(GatewayError):
    """The request body is over the configured limit."""

    http_status = 413
    grpc_status = "RESOURCE_EXHAUSTED"


class PermissionDenied(GatewayError):
    """A management call without the admin token, or one the control mode forbids."""

    http_status = 403
    grpc_status = "PERMISSION_DENIED"


class Conflict(GatewayError):
    """A name already taken (SageMaker's multi-model load of a loaded model)."""

    http_status = 409
    grpc_status = "ALREADY_EXISTS"


class InsufficientStorage(GatewayError):
    """A load that cannot fit the memory budget: SageMaker's signal to unload models and
    try the load again."""

    http_status = 507
    grpc_status = "RESOURCE_EXHAUSTED"


class Cancelled(GatewayError):
    """The client went away before its request ran; nobody reads this answer."""

    http_status = 499  # the de facto "client closed request" status
    grpc_status = "CANCELLED"


class Internal(GatewayError):
    """The backend failed while running a request; the message carries its reason."""


class HandlerFailed(GatewayError):
    """A model's own code failed a request with a status of its choosing (a TorchServe
    handler's PredictionException, or its out-of-memory 507): the status goes to the
    client as it is. `detail` is the model's own message, without ours around it."""

    def __init__(self, message: str, status: int = 500, detail: str = "") -> None:
        super().__init__(message)
        self.http_status = status if 400 <= status <= 599 else 500
        self.grpc_status = {
            400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 503: "UNAVAILABLE",
            507: "RESOURCE_EXHAUSTED",
        }.get(self.http_status, "INTERNAL")  # fmt: skip
        self.detail = detail or message


def by_name(kind: str) -> type[GatewayError] | None:
    """The class of ours with this name (as a worker or a front process sends it), or None."""
    cls = globals().get(kind)
    return cls if isinstance(cls, type) and issubclass(cls, GatewayError) else None
