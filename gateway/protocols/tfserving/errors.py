"""TF Serving's errors: a status code (TensorFlow's, as gRPC's), its HTTP status on the
REST API, and the `{"error": "..."}` body it is written as there."""

from __future__ import annotations

import grpc

from accel_base.errors import GatewayError

# TensorFlow's status codes (they are gRPC's) -> the REST API's HTTP status.
_HTTP = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.CANCELLED: 499,
}


class TfsError(Exception):
    def __init__(self, code: grpc.StatusCode, message: str, http_status: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.http_status = _HTTP.get(code, 500) if http_status is None else http_status


def invalid(message: str) -> TfsError:
    return TfsError(grpc.StatusCode.INVALID_ARGUMENT, message)


def not_found(message: str) -> TfsError:
    return TfsError(grpc.StatusCode.NOT_FOUND, message)


def from_gateway(exc: GatewayError) -> TfsError:
    """A core error as TF Serving's: its codes (413 stays 413 on REST), its message."""
    return TfsError(getattr(grpc.StatusCode, exc.grpc_status), exc.message, exc.http_status)
