"""The gRPC listener of one process, on either server (`--grpc-server`): the gateway's
own HTTP/2 server (gateway/protocols/grpc/h2), or grpc.aio with the extra call acceptors
(gateway/protocols/grpc/acceptors.py). Both serve the same servicers."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import grpc

from gateway.core.interface import Core
from gateway.protocols.grpc.acceptors import Acceptors
from gateway.protocols.grpc.h2.server import H2Server
from gateway.protocols.grpc.service import add_services, set_serving

GRPC_SERVERS = ("gateway", "grpcio")
# New ModelInfer calls that grpc.aio may hand over in one turn of the event loop.
GRPC_ACCEPTORS = 32


def h2_server(options: Any) -> H2Server:
    """The gateway's own HTTP/2 server, bounded as `options` (ServerOptions) say: V2's
    gRPC listener and the gRPC side fronts (TorchServe's) alike."""
    limits = options.limits
    return H2Server(
        max_message_bytes=options.max_body_bytes,
        max_streams=limits.max_streams_per_connection,
        idle_s=limits.keep_alive_s,
        max_connections=limits.max_connections,
        read_timeout_s=limits.read_timeout_s,
    )


class GatewayGrpc:
    """gRPC on the gateway's own HTTP/2 server."""

    def __init__(self, core: Core, options: Any, sock: socket.socket) -> None:
        limits = options.limits
        self.server = h2_server(options)
        self.health, _ = add_services(self.server, core, limits.max_connections, refused_early=True)
        self._socket = sock
        self._tls = options.tls
        self._stopping: asyncio.Task | None = None

    async def start(self) -> None:
        # A context of its own: ALPN must offer h2 here, and HTTP/1.1 on the HTTP port.
        context = self._tls.ssl_context() if self._tls else None
        await self.server.start(self._socket, context)

    async def set_serving(self, serving: bool) -> None:
        await set_serving(self.health, serving)

    def stop_accepting(self, grace_s: float) -> None:
        self._stopping = asyncio.ensure_future(self.server.stop(grace_s))

    async def stop(self, grace_s: float) -> None:
        if self._stopping is None:
            self._stopping = asyncio.ensure_future(self.server.stop(min(grace_s, 1.0)))
        await self._stopping

    def close_socket(self) -> None:
        self._socket.close()


class GrpcioGrpc:
    """gRPC on grpc.aio, with more ModelInfer calls accepted a turn of the loop."""

    def __init__(self, core: Core, options: Any, address: str, reuse_port: bool) -> None:
        limits = options.limits
        self.server = grpc.aio.server(
            # Calls past this many at once get RESOURCE_EXHAUSTED instead of a queue. grpc
            # counts only the calls its own loop accepts; the V2 service counts all of its
            # own (gateway/protocols/grpc/service.py), so this bounds the health service's.
            maximum_concurrent_rpcs=limits.max_connections,
            options=[
                ("grpc.max_receive_message_length", options.max_body_bytes),
                ("grpc.max_send_message_length", -1),  # the limit is on requests, not answers
                ("grpc.max_concurrent_streams", limits.max_streams_per_connection),
                ("grpc.max_connection_idle_ms", int(limits.keep_alive_s * 1000)),
                ("grpc.so_reuseport", 1 if reuse_port else 0),
            ],
        )
        self.health, self._hot_methods = add_services(self.server, core, limits.max_connections)
        credentials = options.tls.grpc_credentials() if options.tls else None
        try:
            if credentials is None:
                self.port = self.server.add_insecure_port(address)
            else:
                self.port = self.server.add_secure_port(address, credentials)
        except RuntimeError as exc:
            raise OSError(f"cannot listen for gRPC on {address}: {exc}") from None
        self.acceptors: Acceptors | None = None
        self._stopping: asyncio.Future | None = None

    async def start(self) -> None:
        await self.server.start()
        self.acceptors = Acceptors(self.server, self._hot_methods, GRPC_ACCEPTORS)
        self.acceptors.start()

    async def set_serving(self, serving: bool) -> None:
        await set_serving(self.health, serving)

    def stop_accepting(self, grace_s: float) -> None:
        # stop() with a grace refuses new calls at once and lets calls in flight end.
        self._stopping = asyncio.ensure_future(self.server.stop(grace=grace_s))

    async def stop(self, grace_s: float) -> None:
        if self._stopping is not None:
            await self._stopping
        else:
            # Requests are answered by now; what is left is streams held open by clients.
            await self.server.stop(grace=min(grace_s, 1.0))

    def close_socket(self) -> None:
        pass  # grpc binds its own
