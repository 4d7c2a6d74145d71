"""A front process's InferenceCore: the same calls the HTTP and gRPC fronts make, each
answered by the model host over the front's channel.

Liveness, drain and load shedding are the front's own (its event loop, its requests in
flight); everything about models (readiness, metadata, statistics, the repository,
inference) is the host's, so every front gives the same answers.
"""

from __future__ import annotations

import asyncio
import itertools
import pickle
from collections.abc import AsyncIterator, Callable
from typing import Any

from accel_base.errors import Internal, PayloadTooLarge, Unavailable
from accel_base.proto import model_config_pb2 as mc
from gateway.core.inference import InferRequest, InferResponse
from gateway.core.interface import Mounted
from gateway.core.shared_memory import SharedMemoryRegistry
from gateway.core.shared_memory_calls import SharedMemoryCalls, run_with_regions
from gateway.front_processes import bundles, wire
from gateway.front_processes.bundler import BUNDLE_REPLIES, Bundler
from gateway.front_processes.channel import Channel
from gateway.front_processes.copies import MESSAGES as COPY_MESSAGES
from gateway.front_processes.copies import FrontCopies
from gateway.front_processes.regions import mirror
from gateway.operation.drain import InFlight
from gateway.operation.shedding import LoopShedder
from gateway.operation.tracing.tracer import Tracing
from workers.arena import Arena

CLIENT_CHECK_S = 0.05  # how often waiting calls' clients are checked


class RemoteCore(SharedMemoryCalls):
    """Shared-memory regions: the front maps each one itself, in a mirror of the host's
    registry that the host keeps up to date (front_processes/regions.py)."""

    def __init__(
        self,
        metadata: dict[str, Any],
        admin_token: str | None,
        shed_lag_ms: float,
        allow_shared_memory: bool = False,
    ) -> None:
        self.metadata = metadata
        self.admin_token = admin_token
        self.channel: Channel | None = None
        self.serving = False
        self.stopping = False
        self.started = True
        self.in_flight = InFlight(per_model=shed_lag_ms > 0)
        self.shedder = LoopShedder(
            shed_lag_ms / 1e3,
            busy=lambda: self.in_flight.count > 0,
            served=self.in_flight.served,
        )
        self.shared_memory = SharedMemoryRegistry(enabled=allow_shared_memory)
        self._calls = itertools.count()
        self._waiting: dict[int, asyncio.Future] = {}
        # Calls whose front can tell that their client went away (HTTP), by call.
        self._probes: dict[int, Callable[[], bool]] = {}
        self._watcher: asyncio.Task | None = None
        self.on_control: Any = None  # (message) -> None for "serving" and "stop"
        self.bundler = Bundler(self)
        # Models this front serves itself (gateway/front_processes/copies.py).
        self.copies = FrontCopies(self._to_host)
        # Off here for good: the host traces the requests (its settings are the ones the
        # trace extension reads and changes).
        self.tracing = Tracing()

    # ---- the channel -------------------------------------------------------------------

    def on_message(self, message: tuple, arena: Arena | None) -> None:
        kind = message[0]
        if kind in BUNDLE_REPLIES and self.bundler.answered(message, arena):
            return
        if kind in ("answer", "error", "result"):
            waiter = self._waiting.pop(message[1], None)
            if waiter is None or waiter.done():
                return  # its caller went away
            try:
                if kind == "answer":
                    waiter.set_result(wire.response_of(message, arena))
                elif kind == "result":
                    waiter.set_result(pickle.loads(wire.result_bytes(message, arena)))
                else:
                    waiter.set_exception(wire.error_of(message))
            except Exception as exc:  # a reply it cannot read still ends the wait
                waiter.set_exception(Internal(f"unreadable answer from the model host: {exc}"))
        elif kind in COPY_MESSAGES:
            self.copies.on_message(message)
        elif kind == "region":
            self._to_host(mirror(self.shared_memory, message))
        elif self.on_control is not None:
            self.on_control(message)

    def _to_host(self, message: tuple) -> None:
        if self.channel is not None and not self.channel.closed:
            self.channel.send(message)

    def host_gone(self) -> None:
        """The channel closed: every call waiting fails, and new ones do at once."""
        self.serving = False
        for waiter in self._waiting.values():
            if not waiter.done():
                waiter.set_exception(Unavailable("the gateway's model host has stopped"))
        self._waiting.clear()
        self.bundler.clear()

    async def _ask(self, call: int, message: tuple, arena: Arena | None = None) -> Any:
        channel = self.channel
        if channel is None or channel.closed:
            if arena is not None:
                arena.close()
            raise Unavailable("the gateway's model host has stopped")
        waiter = asyncio.get_running_loop().create_future()
        self._waiting[call] = waiter
        try:
            channel.send(message, arena)
        except wire.MessageTooLarge as exc:
            del self._waiting[call]
            raise PayloadTooLarge(f"the request is too large for the model host: {exc}") from None
        if channel.closed:  # the send found the host gone (host_gone has run)
            self._waiting.pop(call, None)
            raise Unavailable("the gateway's model host has stopped")
        try:
            return await waiter
        except asyncio.CancelledError:
            if self._waiting.pop(call, None) is not None and message[0] == "infer":
                channel.send(("cancel", call))
            raise

    async def _call(self, method: str, *arguments: Any) -> Any:
        call = next(self._calls)
        return await self._ask(call, ("call", call, method, pickle.dumps(arguments)))

    # ---- what the fronts call ----------------------------------------------------------

    def live(self) -> bool:
        return True

    def ready(self) -> bool:
        return self.serving and not self.stopping

    def server_metadata(self) -> dict[str, Any]:
        return self.metadata

    async def infer_stream(self, request: InferRequest) -> AsyncIterator[InferResponse]:
        """One response: a decoupled model's stream needs --workers 1 (its host refuses
        it here, saying why)."""
        yield await self.infer(request)

    async def infer(self, request: InferRequest) -> InferResponse:
        if self.stopping:
            raise Unavailable("the server is shutting down; send the request elsewhere")
        copy = self.copies.route(request.model_name, request.model_version)
        if copy is not None:  # served here: the host never sees it
            # InFlight.serve, inline (as in InferenceCore.infer): a coroutine less.
            in_flight = self.in_flight
            token, answered = in_flight.enter(request.model_name), False
            try:
                response = await run_with_regions(self.shared_memory, request, copy.infer)
                answered = True
                return response
            finally:
                in_flight.leave(token, answered)
        call = next(self._calls)
        probe = request.client_gone
        if probe is not None:
            self._probes[call] = probe
            if self._watcher is None or self._watcher.done():
                self._watcher = asyncio.ensure_future(self._watch_clients())
        try:
            if self.bundler.takes_bundles(request):
                key = bundles.bundle_key(request)
                if key is not None:
                    return await self.bundler.infer(call, key, request)
            message, arena = self._message(call, request)
            return await self.in_flight.serve(request.model_name, self._ask(call, message, arena))
        finally:
            self._probes.pop(call, None)

    @staticmethod
    def _message(call: int, request: InferRequest) -> tuple[tuple, Arena | None]:
        header = request.header
        headers = header.items() if header is not None and hasattr(header, "items") else None
        return wire.request_message(call, request, headers)

    async def _watch_clients(self) -> None:
        """While calls wait, tell the host of those whose clients went away, so that it
        drops them before they run (the host cannot see the front's connections)."""
        while self._probes:
            await asyncio.sleep(CLIENT_CHECK_S)
            channel = self.channel
            for call, probe in list(self._probes.items()):
                if probe():
                    del self._probes[call]
                    if self.bundler.client_gone(call):
                        continue
                    if channel is not None and self._waiting.get(call) is not None:
                        channel.send(("cancel", call))

    async def register_system_shared_memory(
        self, name: Any, key: Any, offset: Any, byte_size: Any, token: str | None
    ) -> None:
        """Registered in the host, then in every front's mirror, this one's included."""
        if not self.shared_memory.enabled:
            self.shared_memory.register(name, key, offset, byte_size)  # says it is off
        self.check_token(token)
        await self._call("register_system_shared_memory", name, key, offset, byte_size, token)

    async def unregister_system_shared_memory(self, name: str, token: str | None) -> None:
        self.check_token(token)
        await self._call("unregister_system_shared_memory", name, token)

    async def model_ready(self, name: str, version: str = "") -> bool:
        return await self._call("model_ready", name, version)

    async def check_model_ready(self, name: str, version: str = "") -> None:
        await self._call("check_model_ready", name, version)

    async def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        return await self._call("model_metadata", name, version)

    async def model_config(self, name: str, version: str = "") -> mc.ModelConfig:
        return mc.ModelConfig.FromString(await self._call("model_config", name, version))

    async def statistics(self, name: str = "", version: str = "") -> list[dict[str, Any]]:
        return await self._call("statistics", name, version)

    async def repository_index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        return await self._call("repository_index", ready_only)

    async def load_model(self, name: str, token: str | None, parameters: Any = None) -> None:
        await self._call("load_model", name, token, parameters)

    async def unload_model(self, name: str, token: str | None, parameters: Any = None) -> None:
        await self._call("unload_model", name, token, parameters)

    async def load_model_directory(self, name: str, url: str, token: str | None) -> None:
        await self._call("load_model_directory", name, url, token)

    async def unload_model_directory(self, name: str, token: str | None) -> None:
        await self._call("unload_model_directory", name, token)

    async def model_directories(self) -> dict[str, str]:
        return await self._call("model_directories")

    async def load_on_first_use(self, name: str) -> None:
        await self._call("load_on_first_use", name)

    async def set_mounts(self, mounts: dict[str, Mounted | None]) -> None:
        await self._call("set_mounts", mounts)

    async def loaded_models(self) -> list[str]:
        return await self._call("loaded_models")

    async def model_instances(self, name: str, version: str = "") -> list[dict[str, Any]]:
        return await self._call("model_instances", name, version)

    async def log_settings_dict(self) -> dict[str, Any]:
        """The model host's logging (the fronts log little of their own)."""
        return await self._call("log_settings_dict")

    async def update_log_settings(
        self, changes: dict[str, Any], token: str | None
    ) -> dict[str, Any]:
        return await self._call("update_log_settings", changes, token)

    async def trace_settings_dict(self, model: str = "") -> dict[str, Any]:
        return await self._call("trace_settings_dict", model)

    async def update_trace_settings(
        self, changes: dict[str, Any], model: str, token: str | None
    ) -> dict[str, Any]:
        return await self._call("update_trace_settings", changes, model, token)
