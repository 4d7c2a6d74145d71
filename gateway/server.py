"""The server: one InferenceCore (models, queues, batchers, statistics) with its metrics
listener, and the HTTP and gRPC listeners on its own event loop (`--workers 1`) or in
front processes that hand it their requests (`--workers N`, gateway/front_processes)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accel_base.cpu import DEFAULT_BACKEND_NICE
from gateway import SERVER_NAME, __version__
from gateway.arguments import distinct_ports
from gateway.core.mounts import Mount
from gateway.core.placement.options import MemoryOptions
from gateway.core.repository import ModelRepository
from gateway.core.response_cache import ResponseCache
from gateway.core.scheduling.rate_limiter import RateLimiter
from gateway.core.service import InferenceCore
from gateway.front_processes.supervisor import FrontSupervisor
from gateway.listeners import Listeners, check_ports_free, listen, uvicorn_server
from gateway.operation.drain import DEFAULT_DRAIN_SECONDS, UNLOAD_MARGIN_S, start_exit_watchdog
from gateway.operation.limits import ConnectionLimits
from gateway.operation.log_settings import LogSettings
from gateway.operation.metrics import create_metrics_app, render
from gateway.operation.security import (
    ConfigError,
    TLSFiles,
    check_management_exposure,
    is_loopback,
    management_enabled,
)
from gateway.operation.tracing.tracer import Tracing
from gateway.protocols.tfserving.options import TfServingOptions
from gateway.protocols.torchserve.options import TorchServeOptions
from gateway.side_fronts import SideServers, side_fronts

log = logging.getLogger("accel_gateway")


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
    # How long a request may wait to start before it is refused (scheduling/admission.py);
    # None, as Triton: no fixed wait, only a backlog measured to grow is shed.
    queue_budget_ms: float | None = None
    # Backends run this many nice steps below the fronts (accel_base/cpu.py).
    backend_nice: int = DEFAULT_BACKEND_NICE
    # On SIGTERM/SIGINT: how long requests in flight get to finish (gateway/operation/drain.py).
    drain_seconds: float = DEFAULT_DRAIN_SECONDS
    limits: ConnectionLimits = field(default_factory=ConnectionLimits)
    # Refuse a share of requests while the event loop runs this late
    # (gateway/operation/shedding.py); 0: off.
    shed_lag_ms: float = 0.0
    max_body_bytes: int = 64 * 1024 * 1024
    grpc_server: str = "gateway"  # or "grpcio" (gateway/listeners.py)
    admin_token: str | None = None
    server_name: str = SERVER_NAME  # what server metadata reports (--server-name)
    # The response cache's bytes (--cache-config local,size=N); None: no cache.
    cache_bytes: int | None = None
    # Triton's rate limiter: "off" or "execution_count", and --rate-limit-resource's.
    rate_limit: str = "off"
    rate_limit_resources: list[tuple[str, int, int | None]] = field(default_factory=list)
    # Lets clients register /dev/shm regions (system shared memory); off unless asked for.
    allow_shared_memory: bool = False
    # SageMaker's container contract (GET /ping, POST /invocations) on this port; None: off.
    sagemaker_port: int | None = None
    # TorchServe's APIs (inference, management, their gRPC services); None: off.
    torchserve: TorchServeOptions | None = None
    # TF Serving's APIs over its models, each a mount of its base path; None: off.
    tfserving: TfServingOptions | None = None
    # Where the side fronts (SageMaker, TorchServe) listen, when not on `host`:
    # `accel-gateway torchserve` keeps V2 on loopback and TorchServe's API where asked.
    side_host: str | None = None
    # TLS on the HTTP, gRPC and metrics ports (SageMaker's stays plain HTTP); None: off.
    tls: TLSFiles | None = None
    # Management without the admin token on a non-loopback address, only when asked for.
    allow_unauthenticated_management: bool = False
    # Memory budgets, load on demand and eviction (gateway/core/placement).
    memory: MemoryOptions = field(default_factory=MemoryOptions)
    # Front processes serving HTTP and gRPC on the same ports (gateway/front_processes); 1: this
    # process serves them itself.
    workers: int = 1
    # With front processes: each holds copies of the CPU thread models (gateway/core/copies.py).
    front_copies: bool = True
    # Log format and levels, which the logging extension changes at run time.
    log: LogSettings = field(default_factory=LogSettings)
    # A line per inference request (model, status, duration) on accel_gateway.access.
    access_log: bool = False
    # OpenTelemetry tracing (--trace-config; the trace extension changes it at run time).
    tracing: Tracing = field(default_factory=Tracing)

    def check(self) -> None:
        """Raise ConfigError for options that must not start a server."""
        try:
            distinct_ports({
                "--http-port": self.http_port, "--grpc-port": self.grpc_port,
                "--metrics-port": self.metrics_port,
                **({"--sagemaker-port": self.sagemaker_port} if self.sagemaker_port else {}),
                **(self.torchserve.ports() if self.torchserve else {}),
                **(self.tfserving.ports() if self.tfserving else {}),
            })  # fmt: skip
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if self.workers < 1:
            raise ConfigError(f"--workers must be at least 1 (or auto), not {self.workers}")
        if self.workers > 1 and 0 in (self.http_port, self.grpc_port):
            raise ConfigError("--workers above 1 needs fixed HTTP and gRPC ports, not 0")
        check_management_exposure(
            self.host,
            self.admin_token,
            management_enabled(self.model_control_mode, self.allow_shared_memory),
            self.allow_unauthenticated_management,
        )
        ts = self.torchserve
        if ts is not None and (ts.management_port or ts.grpc_management_port):
            # TorchServe's management manages the same models: its key, else the token.
            check_management_exposure(
                ts.management_host or self.side_host or self.host,
                self.admin_token or ("keys" if ts.keys else None), True,
                self.allow_unauthenticated_management, "TorchServe's management address",
            )  # fmt: skip


def _mounts(options: ServerOptions) -> dict[str, Mount]:
    """The models whose directories the fronts' own layouts name (TF Serving's base paths)."""
    if options.tfserving is None:
        return {}
    mounts = options.tfserving.serving.mounts()
    return {name: Mount(*mount) for name, mount in mounts.items()}


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
            options.drain_seconds,
            _mounts(options),
        )
        self.core = InferenceCore(
            self.repository,
            options.admin_token,
            options.allow_shared_memory,
            options.shed_lag_ms,
            options.server_name,
        )
        if options.cache_bytes is not None:
            self.repository.response_cache = ResponseCache(options.cache_bytes)
        if options.rate_limit == "execution_count":
            self.repository.rate_limiter = RateLimiter(options.rate_limit_resources)
        self.core.log_settings = options.log
        self.core.access_log = options.access_log
        self.core.tracing = options.tracing
        if options.access_log:  # its lines are INFO, whatever the server's level
            logging.getLogger("accel_gateway.access").setLevel(logging.INFO)
        if not (options.admin_token or options.allow_unauthenticated_management
                or is_loopback(options.host)):  # fmt: skip
            refusal = (
                "changing the {} settings of a server listening beyond loopback needs "
                "its --admin-token (or --allow-unauthenticated-management)"
            )
            self.core.log_changes_refused = refusal.format("log")
            self.core.trace_changes_refused = refusal.format("trace")
        self._tasks: list[asyncio.Task] = []
        self._poller: asyncio.Task | None = None
        self._shedding: asyncio.Task | None = None
        self.listeners: Listeners | None = None  # HTTP and gRPC, when this process serves them
        self.fronts: FrontSupervisor | None = None  # else the front processes that do
        self.metrics: Any = None
        self.metrics_port = options.metrics_port  # the one bound, once start() has
        self.side = SideServers(
            side_fronts(options, lambda: render(self.repository, fronts=self.fronts)),
            options.side_host or options.host,
        )

    async def start(self) -> None:
        options = self.options
        options.check()
        if self.core.tracing.settings.enabled:  # a bad exporter setting stops the start
            try:
                await asyncio.to_thread(self.core.tracing.prepare)
            except Exception as exc:
                raise ConfigError(f"--trace-config: tracing cannot start: {exc}") from None
        # ConfigError here, before any port is bound, if the TLS files are unusable.
        context = options.tls.ssl_context() if options.tls else None
        # Bind every port before starting anything, so a port in use is one clear error.
        metrics_socket = listen(options.host, options.metrics_port, "metrics")
        self.metrics_port = metrics_socket.getsockname()[1]
        try:
            self.side.bind()
            if options.workers == 1:
                self.listeners = Listeners(self.core, options)
                self.listeners.bind()
            else:  # the fronts bind in their own processes; a port in use ends them
                check_ports_free(options)
        except OSError:
            metrics_socket.close()
            self.side.close()
            raise
        if self.listeners is not None:
            await self.listeners.start(context)
        else:
            self.fronts = FrontSupervisor(
                self.core, options.workers, options,
                logging.getLevelName(log.getEffectiveLevel()), options.front_copies,
            )  # fmt: skip
            self.fronts.start()
        limits = options.limits
        self.metrics = uvicorn_server(
            create_metrics_app(self.repository, self.fronts), limits, context
        )
        self._tasks.append(asyncio.create_task(self.metrics.serve(sockets=[metrics_socket])))
        await self.side.start(self.core, options)

        await self.repository.load_startup_models(options.load_models)
        await self.side.start(self.core, options, after_loads=True)
        self._tasks.extend(self.side.tasks)
        if options.model_control_mode == "poll":
            self._poller = asyncio.create_task(self._poll())
        if options.shed_lag_ms > 0:
            self._shedding = asyncio.create_task(self.core.shedder.watch())
        self.core.started = True
        await self._set_serving(True)
        ready = sorted({m.name for m in self.repository.ready_models()})
        listeners = self.listeners or options  # (with front processes: the options' ports)
        log.info(
            "accel-gateway %s: HTTP %s:%d, gRPC %s:%d, metrics %s:%d, %d front process(es); "
            "%d model(s) ready: %s",
            __version__,
            options.host,
            listeners.http_port,
            options.host,
            listeners.grpc_port,
            options.host,
            self.metrics_port,
            1 if self.listeners is not None else options.workers,
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
        if options.sagemaker_port is not None and options.tls is not None:
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
        """Drain (gateway/operation/drain.py): unready at once, new inference requests refused with
        503 while the listeners stay open, requests in flight answered; then the listeners
        close and every model unloads."""
        loop = asyncio.get_running_loop()
        drain_s = self.options.drain_seconds
        deadline = loop.time() + drain_s
        self.core.stopping = True
        if self._poller is not None:
            self._poller.cancel()
        await self._set_serving(False)
        if self.fronts is not None:  # they drain their requests, which run here
            await self.fronts.stop(drain_s)
        if not await self.core.in_flight.wait_idle(max(deadline - loop.time(), 0.0)):
            log.warning(
                "%d request(s) still in flight after %g s (--drain-seconds); stopping anyway",
                self.core.in_flight.count, drain_s,
            )  # fmt: skip
        remaining = max(deadline - loop.time(), 0.5)
        if self.metrics is not None:
            self.metrics.config.timeout_graceful_shutdown = remaining  # then connections close
            self.metrics.should_exit = True
        self._tasks.extend(self.side.stop(remaining))
        if self.listeners is not None:
            await self.listeners.stop(remaining)
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.core.shared_memory.unregister()
        if self._shedding is not None:
            self._shedding.cancel()
        # What is left of the drain: the watchdog (drain + UNLOAD_MARGIN_S) must not end
        # the process while an unload still waits for a stuck request.
        await self.repository.unload_all(max(deadline - loop.time(), 0.0))
        await self.core.model_calls.close()
        # The exporter's last batches (its export timeout bounds them).
        await self.core.tracing.close()
        log.info("accel-gateway stopped")

    async def _set_serving(self, serving: bool) -> None:
        if self.listeners is not None:
            await self.listeners.set_serving(serving)
        if self.fronts is not None:
            self.fronts.set_serving(serving)

    async def run(self) -> None:
        """Serve until SIGINT or SIGTERM, which may also come while the startup models load."""
        # Settings that must not start a server fail here, before the exit watchdog below
        # exists: in a process that goes on (a test, an embedding program) it would end it.
        self.options.check()
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
