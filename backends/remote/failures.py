"""How a call to a remote endpoint failed, and what that means for the request.

A call that never reached the remote (no connection could be made) may go to another
endpoint: nothing ran. A connection lost after the request went out may have run it,
so that request fails; both take the endpoint out until its health check passes. An
error the remote answered with is the request's own, and the endpoint stays in.
"""

from __future__ import annotations

from accel_base import errors


class NotSent(Exception):
    """The request never left: trying another endpoint is safe."""


class Lost(Exception):
    """The connection failed after the request may have reached the remote."""


# The remote's HTTP status -> our error. A remote that no longer has the model, or is
# overloaded, is a remote that cannot serve now: 503 here, whatever it said there.
_BY_HTTP_STATUS = {
    400: errors.InvalidArgument,
    404: errors.Unavailable,
    413: errors.PayloadTooLarge,
    429: errors.Unavailable,
    503: errors.Unavailable,
    504: errors.Unavailable,
}
_BY_GRPC_STATUS = {
    "INVALID_ARGUMENT": errors.InvalidArgument,
    "NOT_FOUND": errors.Unavailable,
    "UNAVAILABLE": errors.Unavailable,
    "RESOURCE_EXHAUSTED": errors.Unavailable,
    "DEADLINE_EXCEEDED": errors.Unavailable,
    "CANCELLED": errors.Unavailable,
}


def answered_error(status: int | str, endpoint: str, message: str) -> errors.GatewayError:
    """The error a remote answered with (an HTTP status or a gRPC status name)."""
    by_status = _BY_HTTP_STATUS if isinstance(status, int) else _BY_GRPC_STATUS
    kind = by_status.get(status, errors.Internal)
    return kind(f"remote {endpoint} answered {status}: {message}")


def malformed(endpoint: str, what: str) -> errors.Internal:
    """The remote's answer does not hold what the protocol says it must."""
    return errors.Internal(f"remote {endpoint} sent a malformed response: {what}")
