"""Bounds on what clients may hold open at the fronts: connections, streams, slow requests."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ConnectionLimits:
    # HTTP: requests get 503 while this many connections are open; gRPC: calls past this
    # many at once get RESOURCE_EXHAUSTED.
    max_connections: int = 1024
    # A request (headers and body) must arrive whole this long after its first byte, or
    # after the connection opened; else 408 and the connection closes.
    read_timeout_s: float = 30.0
    keep_alive_s: float = 30.0  # idle connections close after this long
    max_streams_per_connection: int = 256  # gRPC (HTTP/2) streams open on one connection
