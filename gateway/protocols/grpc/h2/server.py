"""The gateway's own gRPC server: HTTP/2 on asyncio, serving the handlers grpc's
generated code registers.

grpc.aio spends about half of a small call's server time in its own machinery (three
tasks and three completion-queue round trips a call, README "Serving performance"); this
server parses the frames itself and runs a call as one task. It serves what the gateway's
clients use: unary and streaming calls, deadlines (grpc-timeout), cancellation,
metadata, gzip/deflate request messages, flow control, TLS (ALPN h2), graceful GOAWAY.

What one client may hold or cost is bounded: its connections (at the limit, the one idle
longest makes room for a new client), its streams, the bytes of request messages a
connection holds (inbound.py), how long a unary message may take to arrive, how long a
client may leave our answers unread, and the control frames and header decoding it may
cause in a second (guard.py).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Callable
from typing import Any

from gateway.protocols.grpc.h2 import frames as f
from gateway.protocols.grpc.h2.connection import Connection
from gateway.protocols.grpc.h2.guard import FloodLimits
from gateway.protocols.grpc.h2.headers import error_response

_WINDOW_SLACK = 16 * 1024  # the 5-byte message prefix, and padding, over the message limit


def receive_window(max_message_bytes: int) -> int:
    """Each stream's and each connection's receive window: a whole message fits, so a
    large tensor crosses without waiting for credit."""
    return min(max(max_message_bytes + _WINDOW_SLACK, f.DEFAULT_WINDOW), f.MAX_WINDOW)


class H2Server:
    """The shape of grpc.aio's server the listeners use: handlers are added with
    grpc's generated `add_..._to_server(servicer, server)`."""

    def __init__(
        self,
        max_message_bytes: int,
        max_streams: int,
        idle_s: float,
        max_connections: int,
        read_timeout_s: float = 30.0,
        flood_limits: FloodLimits | None = None,
    ) -> None:
        # Handlers by full method name ("/package.Service/Method").
        self.methods: dict[str, Any] = {}
        self.max_message_bytes = max_message_bytes
        self.receive_window = receive_window(max_message_bytes)
        # Bytes of request messages one connection may hold before its largest call
        # ends: room for several large tensors in flight at once on one channel.
        self.max_held = 4 * self.receive_window
        self.read_timeout_s = read_timeout_s
        # Methods refused before a call exists while `refuse()` says so: the path's bytes
        # -> (refuse, the trailers-only answer's header block).
        self.refusals: dict[bytes, tuple[Callable[[], bool], bytes]] = {}
        self.flood_limits = flood_limits or FloodLimits()
        self.max_streams = max_streams
        self.idle_s = idle_s
        self.max_connections = max_connections
        self.connections: set[Connection] = set()
        # Unary calls open on every connection: the calls in flight (a stream of many
        # requests, or a health watch, is open for as long as its client likes).
        self.open_calls = 0
        self._servers: list[asyncio.AbstractServer] = []

    # grpc's generated code registers its handlers through these two.
    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        pass  # the same methods also come through add_registered_method_handlers

    def add_registered_method_handlers(self, service: str, handlers: dict[str, Any]) -> None:
        for method, handler in handlers.items():
            self.methods[f"/{service}/{method}"] = handler

    async def start(self, sock: socket.socket, context: ssl.SSLContext | None = None) -> None:
        """Serve on a bound socket (its own, or one shared with other processes through
        SO_REUSEPORT)."""
        if context is not None:
            context.set_alpn_protocols(["h2"])  # gRPC clients insist on it
        loop = asyncio.get_running_loop()
        server = await loop.create_server(self._connection, sock=sock, ssl=context, backlog=1024)
        self._servers.append(server)

    def _connection(self) -> Connection:
        return Connection(self)

    def admit(self, connection: Connection) -> bool:
        """Count a new connection in; at the limit, the connection idle longest is let go
        to make room (a client that opens connections and leaves them idle would
        otherwise lock every new one out). False: all are busy, refuse it."""
        if len(self.connections) >= self.max_connections:
            idle = [c for c in self.connections if c.idle_since is not None]
            if not idle:
                return False
            min(idle, key=lambda c: c.idle_since).evict()
        self.connections.add(connection)
        return True

    def refuse_early(
        self,
        path: str,
        refuse: Callable[[], bool],
        status: int,
        message: str,
        metadata: tuple = (),
    ) -> None:
        """Calls of `path` that arrive while `refuse()` is true get a prepared answer of
        `status` as soon as their headers are read: no stream, context or task, and their
        message is not read (an overloaded server must say no for less than it costs to
        serve). A call refused so is not the client's reset: no flood budget counts it."""
        self.refusals[path.encode()] = (refuse, error_response(200, status, message, metadata))

    def stop_accepting(self) -> None:
        for server in self._servers:
            server.close()
        for connection in list(self.connections):
            connection.go_away()

    async def stop(self, grace_s: float | None) -> None:
        """Accept nothing more; calls in flight get `grace_s`, then end CANCELLED, and
        connections that will not close (a client that stopped reading) are cut."""
        self.stop_accepting()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (grace_s or 0.0)
        while any(c.streams for c in self.connections) and loop.time() < deadline:
            await asyncio.sleep(0.02)
        for connection in list(self.connections):
            connection.cancel_calls("the server stopped before the call ended")
            connection.transport.close()
        deadline = loop.time() + 1.0
        while self.connections and loop.time() < deadline:
            await asyncio.sleep(0.02)
        for connection in list(self.connections):
            connection.transport.abort()
        for server in self._servers:
            server.close()
