"""The transport-free server API that both fronts call.

Every V2 operation exists here once, taking and returning plain Python values;
the HTTP and gRPC fronts only translate to and from their wire formats.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import orjson

from accel_base.errors import (
    GatewayError,
    InvalidArgument,
    NotFound,
    Unavailable,
)
from accel_base.proto import model_config_pb2 as mc
from gateway import SERVER_NAME, __version__
from gateway.core.copies import statistics_of
from gateway.core.decoupled import stream_responses
from gateway.core.directory_models import DirectoryModels
from gateway.core.inference import InferRequest, InferResponse, RequestedOutput
from gateway.core.interface import Mounted
from gateway.core.model import ModelVersion
from gateway.core.model_calls import ModelCalls
from gateway.core.repository import ModelRepository
from gateway.core.routing.router import RouterModel
from gateway.core.scheduling.pool import instance_state
from gateway.core.shared_memory import SharedMemoryRegistry
from gateway.core.shared_memory_calls import SharedMemoryCalls, run_with_regions
from gateway.core.streamed import stream_answers
from gateway.operation.drain import InFlight
from gateway.operation.log_settings import LogSettings, LogSettingsCalls
from gateway.operation.shedding import LoopShedder
from gateway.operation.tracing.calls import TraceSettingsCalls
from gateway.operation.tracing.tracer import Tracing

ACCESS = logging.getLogger("accel_gateway.access")

# Only extensions this server implements in full are advertised.
EXTENSIONS = (
    "binary_tensor_data",
    "generate",
    "logging",
    "statistics",
    "model_configuration",
    "model_repository",
    "model_repository(unload_dependents)",
    "parameters",
    "trace",
)


class InferenceCore(SharedMemoryCalls, LogSettingsCalls, TraceSettingsCalls):
    def __init__(
        self,
        repository: ModelRepository,
        admin_token: str | None = None,
        allow_shared_memory: bool = False,
        shed_lag_ms: float = 0.0,
        server_name: str = SERVER_NAME,
    ) -> None:
        self.repository = repository
        self.server_name = server_name
        self.admin_token = admin_token
        self.shared_memory = SharedMemoryRegistry(enabled=allow_shared_memory)
        self.started = False  # set once the startup models have been loaded
        self.stopping = False  # draining: unready, new inference requests refused
        self.in_flight = InFlight(per_model=shed_lag_ms > 0)
        # Refuses a share of new inference requests while the event loop runs late; the
        # fronts ask it before reading a request (gateway/operation/shedding.py).
        self.shedder = LoopShedder(
            shed_lag_ms / 1e3,
            busy=lambda: self.in_flight.count > 0,
            served=self.in_flight.served,
        )
        # Python models call other models through the core, as a client would.
        self.model_calls = repository.model_calls = ModelCalls(self._model_call)
        self.directory_models = DirectoryModels(repository)  # SageMaker's ways to load
        self.log_settings = LogSettings()  # the server's, set by gateway/server.py
        self.tracing = Tracing()  # off until its settings say otherwise
        self.access_log = False

    # ---- health and metadata ---------------------------------------------------------

    def live(self) -> bool:
        return True

    def ready(self) -> bool:
        return self.started and not self.stopping

    def server_metadata(self) -> dict[str, Any]:
        extensions = list(EXTENSIONS)
        if self.shared_memory.enabled:
            extensions.append("system_shared_memory")
        return {"name": self.server_name, "version": __version__, "extensions": extensions}

    async def model_ready(self, name: str, version: str = "") -> bool:
        """Ready or not; an unknown model or version is not ready (as Triton answers over
        gRPC), while a malformed version is an InvalidArgument."""
        return self.repository.is_ready(name, version)

    async def check_model_ready(self, name: str, version: str = "") -> None:
        """Return if the model version is ready, else raise why not: NotFound for an unknown
        model or version, InvalidArgument for a malformed version, Unavailable otherwise."""
        model = self.repository.get(name, version)
        if model.unavailable_reason is not None:
            raise Unavailable(f"model '{name}' is not ready: {model.unavailable_reason}")

    async def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        model = await self._model(name, version)
        versions = self.repository.models[name].ready_versions()
        return model.metadata(versions)

    async def model_config(self, name: str, version: str = "") -> mc.ModelConfig:
        return (await self._model(name, version)).config

    async def model_instances(self, name: str, version: str = "") -> list[dict[str, Any]]:
        return [instance_state(i) for i in (await self._model(name, version)).pool.instances]

    async def _model(self, name: str, version: str) -> ModelVersion:
        """The ready model version; in on-demand mode, loaded first if it is not."""
        try:
            model = self.repository.get(name, version)
        except (NotFound, Unavailable) as missing:
            return await self.repository.get_on_demand(name, version, missing)
        self.repository.memory.stats.hits += 1
        return model

    # ---- inference -------------------------------------------------------------------

    async def infer(self, request: InferRequest) -> InferResponse:
        """Run a request; outputs it asks for in shared memory are written there."""
        if self.stopping:
            raise Unavailable("the server is shutting down; send the request elsewhere")
        if self.access_log:
            return await self._logged(request)
        # InFlight.serve, inline: one coroutine less for every request.
        in_flight = self.in_flight
        token, answered = in_flight.enter(request.model_name), False
        try:
            response = await self._infer(request)
            answered = True
            return response
        finally:
            in_flight.leave(token, answered)

    async def _logged(self, request: InferRequest) -> InferResponse:
        """infer() with its access-log line: model, version, request id, status, time."""
        start, status = time.perf_counter(), 200
        token = self.in_flight.enter(request.model_name)
        try:
            return await self._infer(request)
        except GatewayError as exc:
            status = exc.http_status
            raise
        except asyncio.CancelledError:
            status = 499  # the client went away
            raise
        except BaseException:
            status = 500
            raise
        finally:
            self.in_flight.leave(token, status == 200)
            duration_ms = round((time.perf_counter() - start) * 1000, 3)
            ACCESS.info(
                "%s %s %s %d %.3f ms", _printable(request.model_name),
                _printable(request.model_version or "-"), _printable(request.id or "-"),
                status, duration_ms,
                extra={"model": request.model_name, "version": request.model_version,
                       "request_id": request.id or None, "status": status,
                       "duration_ms": duration_ms},
            )  # fmt: skip

    async def infer_stream(self, request: InferRequest) -> AsyncIterator[InferResponse]:
        """A request on a gRPC stream: one response, or a decoupled model's many."""
        if self.stopping:
            raise Unavailable("the server is shutting down; send the request elsewhere")
        model = await self._model(request.model_name, request.model_version)
        if model.streams and not model.decoupled:  # its answer may follow responses
            if not request.outputs:  # all of them, as a plain call's answer has
                request.outputs = [RequestedOutput(o.name) for o in model.config.output]
            # (The run looks the model up again: an on-demand eviction or a reload may
            # come before it starts.)
            async for response in stream_answers(
                request, self.model_calls.streams, self.infer, model.stream_idle_s
            ):
                yield response
            return
        if not model.decoupled:
            yield await self.infer(request)
            return
        known = {t.name for t in model.config.output}
        unknown = [o.name for o in request.outputs if o.name not in known]
        if unknown:
            raise InvalidArgument(
                f"model '{model.name}' has no output {', '.join(unknown)}; its outputs are: "
                f"{', '.join(known)}"
            )
        idle_s = model.stream_idle_s  # between two responses
        token, answered = self.in_flight.enter(model.name), False
        try:
            async for response in stream_responses(
                request, self.model_calls.streams, model.infer, model.name,
                str(model.version), idle_s,
            ):  # fmt: skip
                yield response
            answered = True
        finally:
            self.in_flight.leave(token, answered)

    async def _model_call(self, request: InferRequest) -> InferResponse:
        """A Python model's call to another model: part of a request already admitted, so
        it runs during a drain too (which waits for it)."""
        return await self.in_flight.serve(None, self._infer(request))

    def _infer(self, request: InferRequest) -> Awaitable[InferResponse]:
        """What answers `request`, to be awaited: the ready model's run (no coroutine of
        its own on that path: a layer less for every request), or an on-demand load's."""
        try:
            model = self.repository.get(request.model_name, request.model_version)
        except (NotFound, Unavailable) as missing:
            return self._infer_on_demand(request, missing)
        self.repository.memory.stats.hits += 1
        return run_with_regions(self.shared_memory, request, model.infer)

    async def _infer_on_demand(self, request: InferRequest, missing: GatewayError) -> InferResponse:
        model = await self.repository.get_on_demand(
            request.model_name, request.model_version, missing
        )
        return await run_with_regions(self.shared_memory, request, model.infer)

    # ---- statistics ------------------------------------------------------------------

    async def statistics(self, name: str = "", version: str = "") -> list[dict[str, Any]]:
        """The statistics extension's rows; a router's also carry its "variants"."""
        if self.repository.copies is not None:  # their counts are part of the answer
            await self.repository.copies.gather()
        if not name:
            return [_statistics(m) for m in self.repository.ready_models()]
        if version:
            return [_statistics(self.repository.get(name, version))]
        entry = self.repository.models.get(name)
        if entry is None or not entry.ready_versions():
            raise NotFound(
                f"Request for unknown model: '{name}' is not found, or it has no ready version"
            )
        return [_statistics(entry.versions[v].model) for v in entry.ready_versions()]

    # ---- repository ------------------------------------------------------------------

    async def repository_index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        return self.repository.index(ready_only)

    def check_admin(self, token: str | None) -> None:
        """Model management needs explicit control mode, and the admin token when one is
        configured."""
        self.repository.check_management_allowed()
        self.check_token(token)

    async def load_model(
        self, name: str, token: str | None, parameters: dict[str, Any] | None = None
    ) -> None:
        """Load or reload a model; the parameter `config` may carry a JSON config override."""
        self.check_admin(token)
        parameters = parameters or {}
        if any(key.startswith("file:") for key in parameters):
            raise InvalidArgument("loading model files through the load call is not supported")
        config_json = None
        if "config" in parameters:
            try:
                config_json = orjson.loads(parameters["config"])
            except (orjson.JSONDecodeError, TypeError) as exc:
                raise InvalidArgument(
                    f"load parameter 'config' must be a JSON string: {exc}"
                ) from None
        await self.repository.load(name, config_json)

    async def unload_model(
        self, name: str, token: str | None, parameters: dict[str, Any] | None = None
    ) -> None:
        """Unload a model; with the parameter `unload_dependents` true, also the models it
        is made of (an ensemble's steps, a router's variants) that nothing else loaded uses."""
        self.check_admin(token)
        parameters = parameters or {}
        dependents = parameters.get("unload_dependents", False)
        if not isinstance(dependents, bool):
            raise InvalidArgument(
                f"unload parameter 'unload_dependents' must be true or false, got {dependents!r}"
            )
        await self.repository.unload(name, dependents=dependents)

    async def load_model_directory(self, name: str, url: str, token: str | None) -> None:
        self.check_token(token)
        await self.directory_models.load(name, url)

    async def unload_model_directory(self, name: str, token: str | None) -> None:
        self.check_token(token)
        await self.directory_models.unload(name)

    async def model_directories(self) -> dict[str, str]:
        models = self.directory_models
        on_demand = self.repository.control_mode == "on-demand"
        loaded = set(await self.loaded_models())
        return {
            name: url for name, url in models.urls.items() if on_demand or name in loaded
        }  # fmt: skip

    async def loaded_models(self) -> list[str]:
        return sorted(self.repository.loaded_names())

    async def load_on_first_use(self, name: str) -> None:
        await self.directory_models.load_on_first_use(name)

    async def set_mounts(self, mounts: dict[str, Mounted | None]) -> None:
        self.repository.set_mounts(mounts)


def _printable(text: str) -> str:
    """A client's text on one log line: control characters escaped, so that none can
    start a line of its own."""
    return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")


def _statistics(model: Any) -> dict[str, Any]:
    row = statistics_of(model).as_dict()
    if isinstance(model, RouterModel):
        row.update(model.variants())
    return row
