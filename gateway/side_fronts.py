"""The protocol fronts beside V2 that listen on ports of their own: SageMaker's container
contract (--sagemaker-port) and TorchServe's inference API (--torchserve-port). Each is
an ASGI app over the core; a new one is an entry in `side_fronts`, bound with the other
ports before anything starts and stopped with them."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway.core.interface import Core
from gateway.listeners import listen, uvicorn_server
from gateway.protocols.http.sagemaker import create_sagemaker_app
from gateway.protocols.torchserve.inference import create_inference_app

log = logging.getLogger("accel_gateway")


@dataclass(frozen=True)
class SideFront:
    name: str  # in errors and logs
    serves: str  # what it serves, for the start's log line
    port: int
    make_app: Callable[[Core, Any], Any]  # (core, ServerOptions) -> ASGI app


def side_fronts(options: Any) -> list[SideFront]:
    """The side fronts `options` (ServerOptions) turn on."""
    fronts = []
    if options.sagemaker_port is not None:
        fronts.append(SideFront(
            "SageMaker", "/ping and /invocations", options.sagemaker_port,
            lambda core, o: create_sagemaker_app(core, o.max_body_bytes),
        ))  # fmt: skip
    if options.torchserve_port is not None:
        fronts.append(SideFront(
            "TorchServe inference", "API (/ping, /predictions)", options.torchserve_port,
            lambda core, o: create_inference_app(core, o.max_body_bytes, o.torchserve_token),
        ))  # fmt: skip
    return fronts


class SideServers:
    """`bind()` every side front's port (a port in use: one clear OSError, nothing left
    bound), `start()` their servers, `stop()` them. They serve plain HTTP: SageMaker's
    platform terminates TLS itself, and TorchServe's clients are on its host."""

    def __init__(self, fronts: list[SideFront], host: str) -> None:
        self.fronts, self.host = fronts, host
        self.sockets: list[socket.socket] = []
        self.servers: list[Any] = []
        self.tasks: list[asyncio.Task] = []

    def bind(self) -> None:
        try:
            for front in self.fronts:
                self.sockets.append(listen(self.host, front.port, front.name))
        except OSError:
            self.close()
            raise

    def close(self) -> None:
        for sock in self.sockets:
            sock.close()
        self.sockets.clear()

    def start(self, core: Core, options: Any) -> None:
        for front, sock in zip(self.fronts, self.sockets, strict=True):
            server = uvicorn_server(front.make_app(core, options), options.limits)
            self.servers.append(server)
            self.tasks.append(asyncio.create_task(server.serve(sockets=[sock])))
            log.info("%s %s on %s:%d", front.name, front.serves, self.host, front.port)

    def stop(self, remaining_s: float) -> None:
        for server in self.servers:
            server.config.timeout_graceful_shutdown = remaining_s  # then connections close
            server.should_exit = True
