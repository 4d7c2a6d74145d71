"""GRPCInferenceService: each RPC decodes, calls the Core (gateway/core/interface.py),
and encodes."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from google.protobuf import json_format
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer

from accel_base.errors import GatewayError, Internal
from accel_base.logs import REQUEST_ID
from accel_base.proto import grpc_service_pb2 as pb
from accel_base.proto import grpc_service_pb2_grpc as pb_grpc
from gateway.core.interface import Core
from gateway.operation.log_settings import Occasional
from gateway.operation.shedding import REFUSAL, RETRY_AFTER_S
from gateway.operation.tracing.tracer import traced
from gateway.protocols.grpc.codec import decode_request, encode_response, parameter_value
from gateway.protocols.grpc.raw_fields import response_pieces, split_request
from gateway.protocols.grpc.streaming import serve_stream

log = logging.getLogger(__name__)
# A model failing every call is one line every 10 s per method and model, not one a call.
_backend_failed = Occasional(log, logging.ERROR, 10.0)
# A refused call's trailers: when grpc's clients may retry (gRFC A6).
PUSHBACK = (("grpc-retry-pushback-ms", str(RETRY_AFTER_S * 1000)),)
MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"


def _rpc(method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """Count the call against the server's limit, turn GatewayErrors into gRPC statuses, and
    anything else into INTERNAL."""

    @functools.wraps(method)
    async def wrapper(self, request, context: grpc.aio.ServicerContext):
        await self.enter(context)
        try:
            return await method(self, request, context)
        except GatewayError as exc:
            if isinstance(exc, Internal):  # a backend's own failure: the operator's news too
                key = (method.__name__, getattr(request, "model_name", ""))
                _backend_failed(key, "a %s call failed: %s", method.__name__, exc.message)
            if exc.retry_after_s is not None:  # gRPC's retry pushback, in milliseconds
                pushback = str(int(exc.retry_after_s * 1000))
                context.set_trailing_metadata((("grpc-retry-pushback-ms", pushback),))
            await context.abort(grpc.StatusCode[exc.grpc_status], exc.message)
        except (asyncio.CancelledError, grpc.aio.AbortError):
            raise
        except Exception as exc:
            log.exception("unexpected error in %s", method.__name__)
            await context.abort(
                grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}"
            )
        finally:
            self.calls -= 1

    return wrapper


class _Metadata:
    """A call's metadata as InferRequest.header: a value by its lower-case key, or all
    of the text ones (a front process forwards them to the model host)."""

    __slots__ = ("context",)

    def __init__(self, context: grpc.aio.ServicerContext) -> None:
        self.context = context

    def __call__(self, name: str) -> str | None:
        for key, value in self.context.invocation_metadata() or ():
            if key == name and isinstance(value, str):
                return value
        return None

    def items(self) -> list[tuple[str, str]]:
        metadata = self.context.invocation_metadata() or ()
        return [(key, value) for key, value in metadata if isinstance(value, str)]


def _token(context: grpc.aio.ServicerContext) -> str | None:
    for key, value in context.invocation_metadata() or ():
        if key == "authorization" and value.lower().startswith("bearer "):
            return value[7:]
    return None


class InferenceService(pb_grpc.GRPCInferenceServiceServicer):
    def __init__(self, core: Core, max_calls: int) -> None:
        self.core = core
        # Calls of this service at once, however grpc accepted them (its own loop or
        # gateway/protocols/grpc/acceptors.py); past `max_calls`, RESOURCE_EXHAUSTED.
        self.max_calls = max_calls
        self.calls = 0

    async def enter(self, context: grpc.aio.ServicerContext) -> None:
        """Count a call in, or refuse it when the server has `max_calls` already."""
        if self.calls >= self.max_calls:
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"the server is serving {self.calls} gRPC calls at once, its limit "
                "(--max-connections); retry later",
            )
        self.calls += 1

    @_rpc
    async def ServerLive(self, request, context):
        return pb.ServerLiveResponse(live=self.core.live())

    @_rpc
    async def ServerReady(self, request, context):
        return pb.ServerReadyResponse(ready=self.core.ready())

    @_rpc
    async def ModelReady(self, request, context):
        ready = await self.core.model_ready(request.name, request.version)
        return pb.ModelReadyResponse(ready=ready)

    @_rpc
    async def ServerMetadata(self, request, context):
        return pb.ServerMetadataResponse(**self.core.server_metadata())

    @_rpc
    async def ModelMetadata(self, request, context):
        data = await self.core.model_metadata(request.name, request.version)
        return pb.ModelMetadataResponse(
            name=data["name"],
            versions=data["versions"],
            platform=data["platform"],
            inputs=[pb.ModelMetadataResponse.TensorMetadata(**t) for t in data["inputs"]],
            outputs=[pb.ModelMetadataResponse.TensorMetadata(**t) for t in data["outputs"]],
        )

    @_rpc
    async def ModelConfig(self, request, context):
        config = await self.core.model_config(request.name, request.version)
        return pb.ModelConfigResponse(config=config)

    @_rpc
    async def ModelStatistics(self, request, context):
        stats = await self.core.statistics(request.name, request.version)
        # A router's "variants" has no field in the proto: HTTP's statistics carry it.
        return json_format.ParseDict(
            {"model_stats": stats}, pb.ModelStatisticsResponse(), ignore_unknown_fields=True
        )

    @_rpc
    async def LogSettings(self, request, context):
        changes = {key: parameter_value(value) for key, value in request.settings.items()}
        if changes:
            settings = await self.core.update_log_settings(changes, _token(context))
        else:
            settings = await self.core.log_settings_dict()
        response = pb.LogSettingsResponse()
        for key, value in settings.items():
            target = response.settings[key]
            if isinstance(value, bool):
                target.bool_param = value
            elif isinstance(value, int):
                target.uint32_param = value
            else:
                target.string_param = str(value)
        return response

    @_rpc
    async def TraceSetting(self, request, context):
        # An empty value clears a model's setting; one value is a string, more a list.
        changes = {
            key: (None if not value.value else list(value.value) if len(value.value) > 1
                  or key == "trace_level" else value.value[0])
            for key, value in request.settings.items()
        }  # fmt: skip
        if changes:
            settings = await self.core.update_trace_settings(
                changes, request.model_name, _token(context)
            )
        else:
            settings = await self.core.trace_settings_dict(request.model_name)
        response = pb.TraceSettingResponse()
        for key, value in settings.items():
            response.settings[key].value.extend(value if isinstance(value, list) else [value])
        return response

    @_rpc
    async def ModelInfer(self, request, context):
        self.core.shedder.check()  # before decoding: a refusal must cost little
        return await self._infer(request, context)

    @_rpc
    async def _admitted_infer(self, split, context):
        """ModelInfer on the gateway's own server: raw contents as views both ways."""
        request, raw = split
        return await self._infer(request, context, raw, response_pieces)

    async def _infer(self, request, context, raw=None, encode=encode_response):
        tracing = self.core.tracing
        started = time.perf_counter_ns() if tracing.settings.enabled else 0
        infer_request = decode_request(request, self.core.shared_memory.input_array, raw)
        infer_request.header = _Metadata(context)
        REQUEST_ID.set(infer_request.id)  # the lines logged while serving it name it
        remaining = context.time_remaining()  # None without a deadline
        if remaining is not None:
            infer_request.deadline = time.monotonic() + remaining
        trace = (
            tracing.start(infer_request, "grpc", started, infer_request.header) if started else None
        )
        if trace is None:
            return encode(await self.core.infer(infer_request))
        return (await traced(trace, self.core.infer(infer_request), encode))[1]

    async def ModelStreamInfer(
        self, request_iterator, context
    ) -> AsyncIterator[pb.ModelStreamInferResponse]:
        """Requests of a stream run concurrently; each response carries its request's id.
        The stream counts as one call against the limit for as long as it is open."""
        await self.enter(context)
        try:
            async for item in serve_stream(self.core, request_iterator, _Metadata(context)):
                yield item
        finally:
            self.calls -= 1

    @_rpc
    async def SystemSharedMemoryStatus(self, request, context):
        Region = pb.SystemSharedMemoryStatusResponse.RegionStatus
        rows = self.core.system_shared_memory_status(request.name)
        return pb.SystemSharedMemoryStatusResponse(
            regions={row["name"]: Region(**row) for row in rows}
        )

    @_rpc
    async def SystemSharedMemoryRegister(self, request, context):
        await self.core.register_system_shared_memory(
            request.name, request.key, request.offset, request.byte_size, _token(context)
        )
        return pb.SystemSharedMemoryRegisterResponse()

    @_rpc
    async def SystemSharedMemoryUnregister(self, request, context):
        await self.core.unregister_system_shared_memory(request.name, _token(context))
        return pb.SystemSharedMemoryUnregisterResponse()

    @_rpc
    async def CudaSharedMemoryStatus(self, request, context):
        self.core.cuda_shared_memory_status(request.name)  # there are never any
        return pb.CudaSharedMemoryStatusResponse()

    @_rpc
    async def CudaSharedMemoryRegister(self, request, context):
        self.core.register_cuda_shared_memory()

    @_rpc
    async def CudaSharedMemoryUnregister(self, request, context):
        self.core.unregister_cuda_shared_memory(_token(context))
        return pb.CudaSharedMemoryUnregisterResponse()

    @_rpc
    async def RepositoryIndex(self, request, context):
        rows = await self.core.repository_index(request.ready)
        return pb.RepositoryIndexResponse(
            models=[
                pb.RepositoryIndexResponse.ModelIndex(
                    name=row["name"],
                    version=row["version"],
                    state=row["state"],
                    reason=row["reason"],
                )  # the HTTP index's "memory" has no field here
                for row in rows
            ]
        )

    @_rpc
    async def RepositoryModelLoad(self, request, context):
        parameters = {key: parameter_value(value) for key, value in request.parameters.items()}
        await self.core.load_model(request.model_name, _token(context), parameters)
        return pb.RepositoryModelLoadResponse()

    @_rpc
    async def RepositoryModelUnload(self, request, context):
        parameters = {key: parameter_value(value) for key, value in request.parameters.items()}
        await self.core.unload_model(request.model_name, _token(context), parameters)
        return pb.RepositoryModelUnloadResponse()


def add_services(
    server: grpc.aio.Server, core: Core, max_calls: int, refused_early: bool = False
) -> tuple[HealthServicer, dict[str, grpc.RpcMethodHandler]]:
    """Register the V2 service (at most `max_calls` of its calls at once) and
    grpc.health.v1 on `server`. Returns the health servicer and the handlers of the calls
    that come many at a time (for gateway/protocols/grpc/acceptors.py). `refused_early`: the
    server refuses ModelInfer for the shedder before a call exists (the gateway's own
    HTTP/2 server, refuse_early below), so the handler does not ask it again."""
    service = InferenceService(core, max_calls)
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(service, server)
    if refused_early:
        handler = grpc.unary_unary_rpc_method_handler(
            service._admitted_infer, request_deserializer=split_request
        )  # no serializer: the response comes as its wire pieces
        service_name, method = MODEL_INFER[1:].split("/")
        server.add_registered_method_handlers(service_name, {method: handler})
        unavailable = grpc.StatusCode.UNAVAILABLE.value[0]
        # The unary calls this server has open count as work in flight: `simple` runs
        # inline, so between calls the core has none, however late the loop.
        refuse = lambda: core.shedder.refuse(server.open_calls)  # noqa: E731
        server.refuse_early(MODEL_INFER, refuse, unavailable, REFUSAL, PUSHBACK)
    health = HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    hot = {
        MODEL_INFER: grpc.unary_unary_rpc_method_handler(
            service.ModelInfer,
            request_deserializer=pb.ModelInferRequest.FromString,
            response_serializer=pb.ModelInferResponse.SerializeToString,
        )
    }
    return health, hot


async def set_serving(health: HealthServicer, serving: bool) -> None:
    status = (
        health_pb2.HealthCheckResponse.SERVING
        if serving
        else health_pb2.HealthCheckResponse.NOT_SERVING
    )
    for service in ("", "inference.GRPCInferenceService"):
        await health.set(service, status)
