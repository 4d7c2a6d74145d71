"""One process, one event loop: the HTTP, gRPC and metrics listeners around one InferenceCore."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import ssl
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import uvicorn

from accel_base.cpu import DEFAULT_BACKEND_NICE
from gateway import __version__
from gateway.core import InferenceCore
from gateway.drain import DEFAULT_DRAIN_SECONDS, UNLOAD_MARGIN_S, start_exit_watchdog
from gateway.grpc.acceptors import Acceptors
from gateway.grpc.service import add_services, set_serving
from gateway.http.app import create_app
from gateway.http.infer_route import with_infer_route
from gateway.http.sagemaker import create_sagemaker_app
from gateway.http.timeouts import timed_protocol
from gateway.limits import ConnectionLimits
from gateway.metrics import create_metrics_app
from gateway.placement.options import MemoryOptions
from gateway.repository import ModelRepository
from gateway.scheduling.admission import DEFAULT_QUEUE_BUDGET_MS
from gateway.security import TLSFiles, check_management_exposure, management_enabled

log = logging.getLogger("accel_gateway")

# New ModelInfer calls that gRPC may hand over in one turn of the event loop
# (gateway/grpc/acceptors.py).
GRPC_ACCEPTORS = 32


@dataclass
class ServerOptions:
    model_repository: Path
    host: str = "127.0.0.1"
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    model_control_mode: str = "none"
    load_models: list[str] = field(default_factory=list)
    poll_interval_s: float = 15.0
    max_queue_size: int = 1024  # per model version: requests waiting or running
    # How long a request may wait to start before it is refused (scheduling/admission.py).
    queue_budget_ms: float = DEFAULT_QUEUE_BUDGET_MS
    # Backends run this many nice steps below the fronts (accel_base/cpu.py).
    backend_nice: int = DEFAULT_BACKEND_NICE
    # On SIGTERM/SIGINT: how long requests in flight get to finish (gateway/drain.py).
    drain_seconds: float = DEFAULT_DRAIN_SECONDS
    limits: ConnectionLimits = field(default_factory=ConnectionLimits)
    # Refuse a share of requests while the event loop runs this late (gateway/shedding.py);
    # 0: off.
    shed_lag_ms: float = 0.0
    max_body_bytes: int = 64 * 1024 * 1024
    admin_token: str | None = None
    # Lets clients register /dev/shm regions (system shared memory); off unless asked for.
    allow_shared_memory: bool = False
    # SageMaker's container contract (GET /ping, POST /invocations) on this port; None: off.
    sagemaker_port: int | None = None
    # TLS on the HTTP, gRPC and metrics ports (SageMaker's stays plain HTTP); None: off.
    tls: TLSFiles | None = None
    # Management without the admin token on a non-loopback address, only when asked for.
    allow_unauthenticated_management: bool = False
    # Memory budgets, load on demand and eviction (gateway/placement).
    memory: MemoryOptions = field(default_factory=MemoryOptions)

    def check(self) -> None:
        """Raise ConfigError for options that must not start a server."""
        check_management_exposure(
            self.host,
            self.admin_token,
            management_enabled(self.model_control_mode, self.allow_shared_memory),
            self.allow_unauthenticated_management,
        )


class _Uvicorn(uvicorn.Server):
    # The gateway owns signal handling for all its listeners.
    @contextlib.contextmanager
    def capture_signals(self):
        yield


def _listen(host: str, port: int, what: str) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise OSError(f"cannot listen for {what} on {host}:{port}: {exc.strerror}") from None
    return sock


def _uvicorn(app, limits: ConnectionLimits, context: ssl.SSLContext | None = None) -> _Uvicorn:
    config = uvicorn.Config(
        app,
        loop="none",
        http=timed_protocol(limits.read_timeout_s),
        # Requests on any connection get 503 while this many connections are open.
        limit_concurrency=limits.max_connections,
        lifespan="off",
        access_log=False,
        log_level="warning",
        timeout_keep_alive=limits.keep_alive_s,
        # Not behind a proxy by default, and per-response headers nobody reads cost time.
        proxy_headers=False,
        server_header=False,
        date_header=False,
        # One context, built and checked at start, serves every TLS listener.
        ssl_context_factory=(lambda _config, _default: context) if context else None,
    )
    return _Uvicorn(config)


class Gateway:
    """The running server; `start()` then `stop()`, or `run()` until a signal."""

    def __init__(self, options: ServerOptions) -> None:
        self.options = options
        self.repository = ModelRepository(
            options.model_repository,
            options.model_control_mode,
            options.max_queue_size,
            options.queue_budget_ms,
            options.backend_nice,
            options.memory.manager(options.model_control_mode),
        )
        self.core = InferenceCore(
            self.repository, options.admin_token, options.allow_shared_memory, options.shed_lag_ms
        )
        self._tasks: list[asyncio.Task] = []
        self._poller: asyncio.Task | None = None
        self._shedding: asyncio.Task | None = None
        self.grpc_server: grpc.aio.Server | None = None
        self.acceptors: Acceptors | None = None
        self.http: _Uvicorn | None = None
        self.metrics: _Uvicorn | None = None
        self.sagemaker: _Uvicorn | None = None

    async def start(self) -> None:
        options = self.options
        options.check()
        # ConfigError here, before any port is bound, if the TLS files are unusable.
        context = options.tls.ssl_context() if options.tls else None
        credentials = options.tls.grpc_credentials() if options.tls else None
        # Bind every port before starting anything, so a port in use is one clear error.
        http_socket = _listen(options.host, options.http_port, "HTTP")
        metrics_socket = _listen(options.host, options.metrics_port, "metrics")
        sagemaker_socket = None
        if options.sagemaker_port is not None:
            sagemaker_socket = _listen(options.host, options.sagemaker_port, "SageMaker")
        limits = options.limits
        self.grpc_server = grpc.aio.server(
            # Calls past this many at once get RESOURCE_EXHAUSTED instead of a queue. grpc
            # counts only the calls its own loop accepts; the V2 service counts all of its
            # own (gateway/grpc/service.py), so this bounds the health service's.
            maximum_concurrent_rpcs=limits.max_connections,
            options=[
                ("grpc.max_receive_message_length", options.max_body_bytes),
                ("grpc.max_send_message_length", -1),  # the limit is on requests, not answers
                ("grpc.max_concurrent_streams", limits.max_streams_per_connection),
                ("grpc.max_connection_idle_ms", int(limits.keep_alive_s * 1000)),
            ],
        )
        self.health, hot_methods = add_services(
            self.grpc_server, self.core, limits.max_connections
        )
        address = f"{options.host}:{options.grpc_port}"
        try:
            if credentials is None:
                self.grpc_server.add_insecure_port(address)
            else:
                self.grpc_server.add_secure_port(address, credentials)
        except RuntimeError as exc:
            for sock in (http_socket, metrics_socket, sagemaker_socket):
                if sock is not None:
                    sock.close()
            raise OSError(f"cannot listen for gRPC on {address}: {exc}") from None
        await self.grpc_server.start()
        self.acceptors = Acceptors(self.grpc_server, hot_methods, GRPC_ACCEPTORS)
        self.acceptors.start()
        await set_serving(self.health, False)

        self.http = _uvicorn(
            with_infer_route(
                create_app(self.core, options.max_body_bytes), self.core, options.max_body_bytes
            ),
            limits,
            context,
        )
        self.metrics = _uvicorn(create_metrics_app(self.repository), limits, context)
        self._tasks.append(asyncio.create_task(self.http.serve(sockets=[http_socket])))
        self._tasks.append(asyncio.create_task(self.metrics.serve(sockets=[metrics_socket])))
        if sagemaker_socket is not None:
            self.sagemaker = _uvicorn(
                create_sagemaker_app(self.core, options.max_body_bytes), limits
            )
            self._tasks.append(
                asyncio.create_task(self.sagemaker.serve(sockets=[sagemaker_socket]))
            )

        await self.repository.load_startup_models(options.load_models)
        if options.model_control_mode == "poll":
            self._poller = asyncio.create_task(self._poll())
        if options.shed_lag_ms > 0:
            self._shedding = asyncio.create_task(self.core.shedder.watch())
        self.core.started = True
        await set_serving(self.health, True)
        ready = sorted({m.name for m in self.repository.ready_models()})
        log.info(
            "accel-gateway %s: HTTP %s:%d, gRPC %s, metrics %s:%d; %d model(s) ready: %s",
            __version__,
            options.host,
            options.http_port,
            address,
            options.host,
            options.metrics_port,
            len(ready),
            ", ".join(ready) or "none",
        )
        if options.tls is not None:
            log.info(
                "TLS on the HTTP, gRPC and metrics ports; client certificates %s",
                f"required (CA {options.tls.client_ca})"
                if options.tls.client_ca
                else "not asked for",
            )
        if options.sagemaker_port is not None:
            log.info(
                "SageMaker /ping and /invocations on %s:%d", options.host, options.sagemaker_port
            )
            if options.tls is not None:
                log.warning(
                    "the SageMaker port %d serves plain HTTP: SageMaker's platform calls "
                    "the container over HTTP and terminates TLS itself",
                    options.sagemaker_port,
                )

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.options.poll_interval_s)
            try:
                await self.repository.poll()
            except Exception:  # a bad repository state must not end polling
                log.exception("repository poll failed")

    async def stop(self) -> None:
        """Drain (gateway/drain.py): unready at once, new inference requests refused with
        503 while the listeners stay open, requests in flight answered; then the listeners
        close and every model unloads."""
        loop = asyncio.get_running_loop()
        drain_s = self.options.drain_seconds
        deadline = loop.time() + drain_s
        self.core.stopping = True
        if self._poller is not None:
            self._poller.cancel()
        if self.grpc_server is not None:
            await set_serving(self.health, False)
        if not await self.core.in_flight.wait_idle(drain_s):
            log.warning(
                "%d request(s) still in flight after %g s (--drain-seconds); stopping anyway",
                self.core.in_flight.count, drain_s,
            )  # fmt: skip
        remaining = max(deadline - loop.time(), 0.5)
        for server in (self.http, self.metrics, self.sagemaker):
            if server is not None:
                server.config.timeout_graceful_shutdown = remaining  # then connections close
                server.should_exit = True
        if self.grpc_server is not None:
            # Requests are answered by now; what is left is streams held open by clients.
            await self.grpc_server.stop(grace=min(remaining, 1.0))
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.core.shared_memory.unregister()
        if self._shedding is not None:
            self._shedding.cancel()
        await self.repository.unload_all()
        log.info("accel-gateway stopped")

    async def run(self) -> None:
        """Serve until SIGINT or SIGTERM, which may also come while the startup models load."""
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        starting = asyncio.ensure_future(self.start())
        signalled = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({starting, signalled}, return_when=asyncio.FIRST_COMPLETED)
            if starting.done():
                starting.result()  # a failed start (a port in use) ends here
                await signalled
            else:  # stopped while starting: the loads still running are abandoned
                starting.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await starting
            log.info(
                "stopping: draining requests in flight (at most %g s)", self.options.drain_seconds
            )
        finally:
            signalled.cancel()
            # Whatever hangs from here on (a child, a library's exit handler), the
            # process ends by then.
            start_exit_watchdog(self.options.drain_seconds + UNLOAD_MARGIN_S)
            await self.stop()
