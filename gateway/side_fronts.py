"""The protocol fronts beside V2 that listen on ports of their own: SageMaker's container
contract (--sagemaker-port), TorchServe's four APIs (inference, management, and their
gRPC services) and TF Serving's (REST, and its two gRPC services). An HTTP front is an
ASGI app over the core; a gRPC front registers its servicers on a gateway HTTP/2 server
of its own. A new front is an entry in `side_fronts`, bound with the other ports before
anything starts and stopped with them."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, replace
from typing import Any

from gateway.core.interface import Core
from gateway.listeners import listen, uvicorn_server
from gateway.operation.security import TLSFiles
from gateway.protocols.grpc.h2.server import H2Server
from gateway.protocols.grpc.listener import h2_server
from gateway.protocols.http.direct import DirectPath
from gateway.protocols.http.sagemaker import create_sagemaker_app
from gateway.protocols.tfserving.grpc_api import add_tfserving_services
from gateway.protocols.tfserving.options import TfServingOptions
from gateway.protocols.tfserving.reload import Reloader
from gateway.protocols.tfserving.rest import create_rest_app
from gateway.protocols.torchserve.grpc_api import (
    add_torchserve_inference,
    add_torchserve_management,
)
from gateway.protocols.torchserve.inference import PredictionsRoute, create_inference_app
from gateway.protocols.torchserve.keys import AdminKey
from gateway.protocols.torchserve.management import Management
from gateway.protocols.torchserve.management_http import create_management_app
from gateway.protocols.torchserve.options import TorchServeOptions

log = logging.getLogger("accel_gateway")


@dataclass(frozen=True)
class SideFront:
    name: str  # in errors and logs
    serves: str  # what it serves, for the start's log line
    port: int
    # HTTP: (core, ServerOptions) -> an ASGI app; gRPC: (core, H2Server) -> None, which
    # registers the front's servicers on the server.
    make: Callable[[Core, Any], Any]
    grpc: bool = False
    host: str | None = None  # where it listens, when not on the side fronts' host
    # Whether it takes the server's --tls-cert (SageMaker's platform terminates TLS itself;
    # TorchServe's fronts carry keys and model control, so they do not go plain).
    tls: bool = False
    # Whether it answers only once the start's models have loaded (TF Serving's, whose
    # clients take its first answer as the models being there); its port is bound from
    # the start, so connections wait in the backlog meanwhile.
    after_loads: bool = False
    # A task that runs while the front serves (TF Serving's polling), cancelled at stop.
    background: Callable[[Core], Coroutine[Any, Any, None]] | None = None
    # TLS files of its own (TF Serving's --ssl_config_file), in place of the server's.
    tls_files: TLSFiles | None = None
    # HTTP: what its protocol answers without ASGI (gateway/protocols/http/direct.py).
    direct: Callable[[Core], DirectPath] | None = None


def _torchserve_fronts(ts: TorchServeOptions, options: Any) -> list[SideFront]:
    """TorchServe's fronts share what they know of its models, and one Management."""
    models = ts.models(options.model_repository, options.admin_token)
    shared: dict[str, Management] = {}

    def management(core: Core) -> Management:
        if "management" not in shared:
            shared["management"] = Management(core, models)
        return shared["management"]

    body = options.max_body_bytes
    # Who may manage: TorchServe's management key, else the server's admin token.
    managing = ts.keys or (AdminKey(options.admin_token) if options.admin_token else None)
    fronts = []
    if ts.inference_port is not None:
        fronts.append(SideFront(
            "TorchServe inference", "API (/ping, /predictions)", ts.inference_port,
            lambda core, _: create_inference_app(core, models, body, ts.keys),
            host=ts.inference_host, tls=True,
            direct=lambda core: DirectPath(
                PredictionsRoute(core, models, ts.keys), body, PredictionsRoute.PREFIXES),
        ))  # fmt: skip
    if ts.management_port is not None:
        fronts.append(SideFront(
            "TorchServe management", "API (/models)", ts.management_port,
            lambda core, _: create_management_app(management(core), managing),
            host=ts.management_host, tls=True,
        ))  # fmt: skip
    if ts.grpc_inference_port is not None:
        fronts.append(SideFront(
            "TorchServe gRPC inference", "InferenceAPIsService", ts.grpc_inference_port,
            lambda core, server: add_torchserve_inference(
                server, core, models, ts.keys),
            grpc=True, host=ts.inference_host, tls=True,
        ))  # fmt: skip
    if ts.grpc_management_port is not None:
        fronts.append(SideFront(
            "TorchServe gRPC management", "ManagementAPIsService", ts.grpc_management_port,
            lambda core, server: add_torchserve_management(
                server, management(core), managing),
            grpc=True, host=ts.management_host, tls=True,
        ))  # fmt: skip
    return fronts


def _tfserving_fronts(
    tfs: TfServingOptions, options: Any, metrics_text: Callable[[], str]
) -> list[SideFront]:
    """TF Serving's fronts share its models and one Reloader, whose polling runs beside
    the first front; its REST front may serve a Prometheus page, with `metrics_text`
    (the gateway's own metrics) after TF Serving's."""
    shared: dict[str, Reloader] = {}

    def reloader(core: Core) -> Reloader:
        if "reloader" not in shared:
            shared["reloader"] = Reloader(core, tfs.serving)
        return shared["reloader"]

    fronts = []
    if tfs.grpc_port is not None:
        fronts.append(SideFront(
            "TF Serving gRPC", "PredictionService and ModelService", tfs.grpc_port,
            lambda core, server: add_tfserving_services(
                server, core, tfs.serving, options.max_body_bytes, reloader(core)),
            grpc=True, tls=True, after_loads=True, tls_files=tfs.grpc_tls,
        ))  # fmt: skip
    if tfs.rest_port is not None:
        fronts.append(SideFront(
            "TF Serving REST", "API (/v1/models)", tfs.rest_port,
            lambda core, o: create_rest_app(
                core, tfs.serving, o.max_body_bytes, tfs.rest_timeout_s,
                (tfs.prometheus_path, metrics_text) if tfs.prometheus_path else None),
            tls=True,
            after_loads=True,
        ))  # fmt: skip
    if fronts:
        polling = tfs.polling
        fronts[0] = replace(fronts[0], background=lambda core: reloader(core).run(polling))
    return fronts


def side_fronts(options: Any, metrics_text: Callable[[], str] = lambda: "") -> list[SideFront]:
    """The side fronts `options` (ServerOptions) turn on; `metrics_text`: the gateway's
    metrics page, for fronts that serve one of their own."""
    fronts = []
    if options.sagemaker_port is not None:
        fronts.append(SideFront(
            "SageMaker", "/ping and /invocations", options.sagemaker_port,
            lambda core, o: create_sagemaker_app(core, o.max_body_bytes),
        ))  # fmt: skip
    if options.torchserve is not None:
        fronts += _torchserve_fronts(options.torchserve, options)
    if options.tfserving is not None:
        fronts += _tfserving_fronts(options.tfserving, options, metrics_text)
    return fronts


class SideServers:
    """`bind()` every side front's port (a port in use: one clear OSError, nothing left
    bound), `start()` their servers, `stop()` them. With --tls-cert, TorchServe's fronts
    serve TLS as V2's do; SageMaker's stays plain HTTP (its platform terminates TLS)."""

    def __init__(self, fronts: list[SideFront], host: str) -> None:
        self.fronts, self.host = fronts, host
        self.sockets: list[socket.socket] = []
        self.servers: list[Any] = []
        self.grpc_servers: list[H2Server] = []
        self.tasks: list[asyncio.Task] = []
        self.background: list[asyncio.Task] = []

    def bind(self) -> None:
        try:
            for front in self.fronts:
                self.sockets.append(listen(front.host or self.host, front.port, front.name))
        except OSError:
            self.close()
            raise

    def close(self) -> None:
        for sock in self.sockets:
            sock.close()
        self.sockets.clear()

    async def start(self, core: Core, options: Any, after_loads: bool = False) -> None:
        """Start serving the fronts that open before the start's model loads, or (with
        `after_loads`) those that open once they are done."""
        limits = options.limits
        for front, sock in zip(self.fronts, self.sockets, strict=True):
            if front.after_loads != after_loads:
                continue
            # A context of its own each: the gRPC server sets its ALPN on it.
            files = front.tls_files or (options.tls if front.tls else None)
            context = files.ssl_context() if files else None
            if front.grpc:
                server = h2_server(options)
                front.make(core, server)
                await server.start(sock, context)
                self.grpc_servers.append(server)
            else:
                direct = front.direct(core) if front.direct is not None else None
                app = front.make(core, options)
                uvicorn = uvicorn_server(app, limits, context, direct=direct)
                self.servers.append(uvicorn)
                self.tasks.append(asyncio.create_task(uvicorn.serve(sockets=[sock])))
            if front.background is not None:
                self.background.append(asyncio.create_task(front.background(core)))
            host = front.host or self.host
            log.info("%s %s on %s:%d", front.name, front.serves, host, front.port)

    def stop(self, remaining_s: float) -> list[asyncio.Future]:
        """Ask every server to stop; the gRPC servers' stops, to await."""
        for task in self.background:
            task.cancel()
        for server in self.servers:
            server.config.timeout_graceful_shutdown = remaining_s  # then connections close
            server.should_exit = True
        return [asyncio.ensure_future(s.stop(remaining_s)) for s in self.grpc_servers]
