"""The HTTP and gRPC listeners of one process around a core: the server's own
InferenceCore, or a front process's RemoteCore (gateway/front_processes). Several front processes
bind the same ports with SO_REUSEPORT, and the kernel spreads connections among them.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from typing import Any

import uvicorn

from gateway.core.interface import Core
from gateway.operation.limits import ConnectionLimits
from gateway.protocols.grpc.listener import GatewayGrpc, GrpcioGrpc
from gateway.protocols.http.app import create_app
from gateway.protocols.http.direct import DirectPath, direct_protocol
from gateway.protocols.http.early_refusal import protocol_for
from gateway.protocols.http.generate import with_generate_route
from gateway.protocols.http.infer_route import InferRoute, with_infer_route
from gateway.protocols.http.timeouts import timed_protocol


def event_loop_factory():
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


class _Uvicorn(uvicorn.Server):
    # The gateway owns signal handling for all its listeners.
    @contextlib.contextmanager
    def capture_signals(self):
        yield


BACKLOG = 2048  # uvicorn's own default


def listen(host: str, port: int, what: str, reuse_port: bool = False) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
        # Listening now, not when its server starts: two SO_REUSEADDR sockets may both
        # bind one port, and only listen() tells them apart (a clash then would fail in
        # the server's task, after the start said ready).
        sock.listen(BACKLOG)
    except OSError as exc:
        sock.close()
        raise OSError(f"cannot listen for {what} on {host}:{port}: {exc.strerror}") from None
    return sock


def check_ports_free(options: Any) -> None:
    """Raise OSError, naming the port, when the HTTP or gRPC port is taken, even by one
    that shares it (another gateway's fronts): the front processes bind them later."""
    for port, what in ((options.http_port, "HTTP"), (options.grpc_port, "gRPC")):
        listen(options.host, port, what).close()


def uvicorn_server(
    app: Any, limits: ConnectionLimits, context: ssl.SSLContext | None = None,
    shedder: Any = None, direct: DirectPath | None = None,
) -> _Uvicorn:  # fmt: skip
    """`shedder`: the core's LoopShedder, for a server of inference requests (they are
    refused before uvicorn builds them while it says so:
    gateway/protocols/http/early_refusal.py). `direct`: the requests the protocol answers
    without ASGI (gateway/protocols/http/direct.py)."""
    protocol = timed_protocol(limits.read_timeout_s)
    if direct is not None:
        protocol = direct_protocol(protocol, direct)
    config = uvicorn.Config(
        app,
        loop="none",
        http=protocol_for(protocol, shedder),
        # Requests on any connection get 503 while this many connections are open:
        # checked per request (two len() calls), not once per connection, since one
        # opened before the cap was reached gets the 503s too.
        limit_concurrency=limits.max_connections,
        lifespan="off",
        access_log=False,
        # uvicorn's messages go to the root logger, in the server's format (--log-format).
        log_config=None,
        log_level="warning",
        timeout_keep_alive=limits.keep_alive_s,  # type: ignore[arg-type]  # (a float works)
        # Not behind a proxy by default, and per-response headers nobody reads cost time.
        proxy_headers=False,
        server_header=False,
        date_header=False,
        # Each request's task in a fresh context: a pipelined request's task is started
        # from its predecessor's and would inherit its request id (CPython #140947), as
        # would later ones on asyncio's loop. Cheaper than clearing the id at the start
        # of every route (a ContextVar.set costs more than the empty context).
        reset_contextvars=True,
        # One context, built and checked at start, serves every TLS listener.
        ssl_context_factory=(lambda _config, _default: context) if context else None,
    )
    return _Uvicorn(config)


class Listeners:
    """HTTP and gRPC around `core`: `bind()` (a port in use is one clear error before
    anything starts), `start()`, `set_serving()`, then `stop()`."""

    def __init__(self, core: Core, options: Any, reuse_port: bool = False) -> None:
        """`options`: the server's ServerOptions (host, ports, limits, TLS, body limit,
        which gRPC server)."""
        self.core = core
        self.options = options
        self.reuse_port = reuse_port
        self.grpc_address = f"{options.host}:{options.grpc_port}"
        self.grpc: GatewayGrpc | GrpcioGrpc | None = None
        self.http: _Uvicorn | None = None
        self._http_socket: socket.socket | None = None
        self._task: asyncio.Task | None = None
        # The ports bound (the options' 0: the one the system chose).
        self.http_port, self.grpc_port = options.http_port, options.grpc_port

    def bind(self) -> None:
        options = self.options
        self._http_socket = listen(options.host, options.http_port, "HTTP", self.reuse_port)
        self.http_port = self._http_socket.getsockname()[1]
        try:
            if options.grpc_server == "grpcio":
                self.grpc = GrpcioGrpc(self.core, options, self.grpc_address, self.reuse_port)
                self.grpc_port = self.grpc.port
            else:
                sock = listen(options.host, options.grpc_port, "gRPC", self.reuse_port)
                self.grpc_port = sock.getsockname()[1]
                self.grpc = GatewayGrpc(self.core, options, sock)
        except OSError:
            self._http_socket.close()
            raise

    async def start(self, context: ssl.SSLContext | None) -> None:
        assert self.grpc is not None and self._http_socket is not None, "bind() first"
        await self.grpc.start()
        await self.grpc.set_serving(False)
        options = self.options
        app = create_app(self.core, options.max_body_bytes)
        route = InferRoute(self.core, options.max_body_bytes)
        self.http = uvicorn_server(
            with_infer_route(
                with_generate_route(app, self.core, options.max_body_bytes), self.core,
                options.max_body_bytes,
            ),
            options.limits, context,
            getattr(self.core, "shedder", None),
            DirectPath(route, options.max_body_bytes, InferRoute.PREFIXES),
        )  # fmt: skip
        self._task = asyncio.create_task(self.http.serve(sockets=[self._http_socket]))

    async def set_serving(self, serving: bool) -> None:
        if self.grpc is not None:
            await self.grpc.set_serving(serving)

    def close_http(self, grace_s: float) -> None:
        """HTTP stops accepting; open connections get `grace_s` to finish."""
        if self.http is not None:
            self.http.config.timeout_graceful_shutdown = grace_s  # type: ignore[assignment]
            self.http.should_exit = True

    def stop_accepting(self, grace_s: float) -> None:
        """Close the listening sockets; connections already open are served on (HTTP until
        stop()), gRPC calls in flight for up to `grace_s`."""
        if self.http is not None:
            for server in self.http.servers:
                server.close()
        if self.grpc is not None:
            self.grpc.stop_accepting(grace_s)

    async def stop(self, grace_s: float) -> None:
        self.close_http(grace_s)
        if self.grpc is not None:
            await self.grpc.stop(grace_s)
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
