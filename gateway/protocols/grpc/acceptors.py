"""Accept new unary calls many at a time, not one per few turns of the event loop.

grpc.aio's server keeps one request for the next call outstanding per method, and re-arms
it only after that call has passed through three tasks of the event loop. So a unary method
takes at most one new call per few loop turns, whatever the client's concurrency: `simple`
over gRPC unary ran 3.6k calls/s from concurrency 1 to 64, where the same requests on one
ModelStreamInfer stream (no new calls) ran 9.5k (benchmarks.serving_simple, one core). Under
HTTP load the turns grow longer and gRPC calls wait at the door.

`Acceptors` keeps `per_method` more requests outstanding for the hot methods, through the
same calls of grpc's Cython layer that the server's own loop makes (`_request_registered_call`,
`_handle_rpc`, `_schedule_rpc_coro`). They are private to grpcio, so `available()` checks for
them first; without them the server runs as grpc ships it and a warning says so.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Mapping

import grpc

log = logging.getLogger(__name__)

try:
    from grpc._cython import cygrpc
except ImportError:  # pragma: no cover - grpcio always has it today
    cygrpc = None

# What the acceptors call, with the parameters they pass (grpcio 1.81 to 1.85 at least).
_NEEDS = {
    "_handle_rpc": (
        "method_name", "method_resolver", "interceptors", "rpc_state", "loop",
        "concurrency_exceeded",
    ),
    "_schedule_rpc_coro": ("rpc_coro", "rpc_state", "loop", "method_name"),
}  # fmt: skip


def available() -> bool:
    """Whether this grpcio has the internals the acceptors use, with the same parameters."""
    if cygrpc is None or not hasattr(cygrpc, "_MethodResolver"):
        return False
    if not hasattr(cygrpc, "_RequestCallError"):
        return False
    if not hasattr(getattr(cygrpc, "AioServer", None), "_request_registered_call"):
        return False
    for name, parameters in _NEEDS.items():
        try:
            found = tuple(inspect.signature(getattr(cygrpc, name)).parameters)
        except (AttributeError, TypeError, ValueError):
            return False
        if found != parameters:
            return False
    return True


class Acceptors:
    """Extra outstanding call requests for some registered methods of one grpc.aio server.

    `handlers` maps a fully qualified method ("/package.Service/Method") to its handler, as
    registered on the server (which has no interceptors: calls taken here would pass them
    by). The acceptors take no part in limits: the servicer counts its calls itself. They
    end when the server stops, which fails their outstanding requests; they must never be
    cancelled while it runs, since grpc's core still holds their requests' memory.
    """

    def __init__(
        self,
        server: grpc.aio.Server,
        handlers: Mapping[str, grpc.RpcMethodHandler],
        per_method: int,
    ) -> None:
        self._server = server
        self._handlers = dict(handlers)
        self._per_method = per_method
        self.accepted = 0  # calls taken by these acceptors since start
        self._acceptors: list[asyncio.Task] = []
        self._calls: set[asyncio.Task] = set()

    @property
    def running(self) -> int:
        """Acceptor tasks still waiting for calls."""
        return sum(not task.done() for task in self._acceptors)

    def start(self) -> bool:
        """Start the acceptors on the running loop, once the server has started; False (and a
        warning) where this grpcio lacks what they need."""
        resolver = None
        if available():
            try:
                resolver = cygrpc._MethodResolver([], self._handlers)
            except Exception:  # a grpcio whose resolver changed shape
                resolver = None
        if resolver is None:
            log.warning(
                "grpcio %s lacks the internals that accept gRPC calls many at a time; "
                "unary calls are accepted one at a time, as grpc.aio does by itself",
                grpc.__version__,
            )
            return False
        for method in self._handlers:
            for _ in range(self._per_method):
                self._acceptors.append(asyncio.create_task(self._accept(method, resolver)))
        return True

    async def _accept(self, method: str, resolver: object) -> None:
        aio_server = self._server._server  # the Cython AioServer behind grpc.aio.Server
        method_bytes = method.encode()
        loop = asyncio.get_running_loop()
        while True:
            try:
                rpc_state = await aio_server._request_registered_call(method_bytes)
            except cygrpc._RequestCallError:
                if aio_server.is_running():
                    continue  # one request failed, as grpc's own loop allows: ask again
                return  # the server is stopping: core fails the outstanding requests
            except (cygrpc.InternalError, cygrpc.UsageError):
                if aio_server.is_running():
                    log.exception("a gRPC call acceptor for %s ended", method)
                return
            try:
                handling = cygrpc._handle_rpc(method, resolver, (), rpc_state, loop, False)
                task = loop.create_task(
                    cygrpc._schedule_rpc_coro(handling, rpc_state, loop, method)
                )
            except Exception:  # this call is lost to its deadline; the acceptor goes on
                log.exception("a gRPC call to %s could not be handled", method)
                continue
            self.accepted += 1
            self._calls.add(task)
            task.add_done_callback(self._calls.discard)
