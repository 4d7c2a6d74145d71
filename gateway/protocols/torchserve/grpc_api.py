"""TorchServe's gRPC APIs, each on a port of its own (7070 and 7071 by default, as
TorchServe's), with TorchServe's own service definitions (protos/torchserve/), so that
stubs generated from TorchServe's .proto files call them unchanged:

- InferenceAPIsService (here): Ping, Predictions, StreamPredictions, StreamPredictions2;
  every prediction goes through `predict`, the one path to a handler.
- ManagementAPIsService (grpc_management.py): register, describe, list, scale,
  set-default, unregister, through the same Management as the HTTP API.

Errors, token authorization and the input fields: grpc_common.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import orjson

from accel_base.proto.torchserve import inference_pb2 as pb
from accel_base.proto.torchserve import inference_pb2_grpc as pb_grpc
from accel_base.proto.torchserve import management_pb2_grpc as management_pb_grpc
from accel_base.proto.torchserve import status_pb2
from gateway.core.interface import Core
from gateway.protocols.torchserve.grpc_common import (
    NO_MODEL_NAME,
    Auth,
    Failure,
    form_body,
    inference_failure,
    token_refusal,
)
from gateway.protocols.torchserve.grpc_management import ManagementServicer
from gateway.protocols.torchserve.inference import predict, predict_stream
from gateway.protocols.torchserve.management import Management
from gateway.protocols.torchserve.models import TorchServeModels

# StreamPredictions2: requests of one call that may run ahead of their answers, and their
# bytes (one request larger than this runs alone).
STREAM_AHEAD = 32
STREAM_AHEAD_BYTES = 64 * 1024 * 1024
SEQUENCES_UNSERVED = (
    "sequence_id: TorchServe's sequence batching (a stateful model's sequences) is not "
    "served here; send each request without a sequence_id"
)


def add_torchserve_inference(server: Any, core: Core, models: TorchServeModels,
                             auth: Auth) -> None:  # fmt: skip
    """`auth`: whose inference key calls must send (keys.py); None: none."""
    pb_grpc.add_InferenceAPIsServiceServicer_to_server(
        InferenceServicer(core, models, auth), server
    )


def add_torchserve_management(server: Any, management: Management, auth: Auth) -> None:
    """`auth`: whose management key (or admin token) calls must send; None: none."""
    management_pb_grpc.add_ManagementAPIsServiceServicer_to_server(
        ManagementServicer(management, auth), server
    )


async def _abort(context: Any, failure: Failure) -> None:
    await context.abort(failure.code, failure.details)


def _error_response(failure: Failure) -> pb.PredictionResponse:
    """A StreamPredictions2 request's failure, as TorchServe answers it in the stream: a
    google.rpc.Status with the code, the message, and an ErrorInfo naming the exception."""
    response = pb.PredictionResponse()
    response.status.code = failure.code.value[0]
    response.status.message = failure.message
    response.status.details.add().Pack(status_pb2.ErrorInfo(reason=failure.reason))
    return response


class _NoModelName(Exception):
    pass


class InferenceServicer(pb_grpc.InferenceAPIsServiceServicer):
    def __init__(self, core: Core, models: TorchServeModels, auth: Auth) -> None:
        self.core, self.models, self.auth = core, models, auth

    async def _authorize(self, context: Any) -> None:
        # TorchServe checks the key on every call of the service, Ping's included.
        refusal = token_refusal(context.invocation_metadata(), self.auth, "inference")
        if refusal is not None:
            await _abort(context, refusal)

    async def _predict(self, request: pb.PredictionsRequest) -> pb.PredictionResponse:
        """The handler's answer. Its status (set_response_status) stays out of it, as
        TorchServe's gRPC answers carry only the bytes; a sequence_id outside
        StreamPredictions2 is not read, as TorchServe does not read it there."""
        if not request.model_name:
            raise _NoModelName
        self.core.shedder.check()
        body, content_type = form_body(request.input)
        answer = await predict(
            self.core, self.models, request.model_name, request.model_version, body,
            content_type, [],
        )  # fmt: skip
        return pb.PredictionResponse(prediction=answer.body)

    @staticmethod
    def _failure(exc: Exception) -> Failure:
        if isinstance(exc, _NoModelName):  # TorchServe's code and reason for it
            return Failure(grpc.StatusCode.INTERNAL, NO_MODEL_NAME, "BadRequestException.()")
        return inference_failure(exc)

    async def Ping(self, request: Any, context: Any) -> pb.TorchServeHealthResponse:
        await self._authorize(context)
        # The JSON of the inference API's /ping, indented as TorchServe's (no newline after).
        status = "Healthy" if self.core.ready() else "Unhealthy"
        health = orjson.dumps({"status": status}, option=orjson.OPT_INDENT_2).decode()
        return pb.TorchServeHealthResponse(health=health)

    async def Predictions(self, request: pb.PredictionsRequest, context: Any) -> Any:
        await self._authorize(context)
        try:
            return await self._predict(request)
        except Exception as exc:
            await _abort(context, self._failure(exc))

    async def StreamPredictions(
        self, request: pb.PredictionsRequest, context: Any
    ) -> AsyncIterator[pb.PredictionResponse]:
        """The handler's intermediate responses (send_intermediate_predict_response) as
        they come, then its answer, then the end of the stream; one answer from a handler
        that sends none."""
        await self._authorize(context)
        try:
            if not request.model_name:
                raise _NoModelName
            self.core.shedder.check()
            body, content_type = form_body(request.input)
            answers = predict_stream(
                self.core, self.models, request.model_name, request.model_version, body,
                content_type, [],
            )  # fmt: skip
            try:
                async for answer in answers:
                    yield pb.PredictionResponse(prediction=answer.body)
            finally:
                await answers.aclose()
        except Exception as exc:
            await _abort(context, self._failure(exc))

    async def StreamPredictions2(
        self, requests: AsyncIterator[pb.PredictionsRequest], context: Any
    ) -> AsyncIterator[pb.PredictionResponse]:
        """Each request's answer, in the order the requests came; a request's failure is
        its answer's `status` (as TorchServe's), and the stream goes on. Requests run
        ahead of their answers (up to STREAM_AHEAD, STREAM_AHEAD_BYTES), so that a
        model's batcher may put several of one stream in a batch."""
        await self._authorize(context)
        ahead: asyncio.Queue[tuple[asyncio.Future, int] | None] = asyncio.Queue(STREAM_AHEAD)
        held = {"bytes": 0}
        freed = asyncio.Event()

        async def answer(request: pb.PredictionsRequest) -> pb.PredictionResponse:
            if request.sequence_id:
                return _error_response(Failure(
                    grpc.StatusCode.UNIMPLEMENTED, SEQUENCES_UNSERVED, "BadRequestException.()"
                ))  # fmt: skip
            try:
                return await self._predict(request)
            except Exception as exc:
                return _error_response(self._failure(exc))

        async def read() -> None:
            try:
                async for request in requests:
                    size = request.ByteSize()
                    while held["bytes"] and held["bytes"] + size > STREAM_AHEAD_BYTES:
                        freed.clear()
                        await freed.wait()
                    held["bytes"] += size
                    await ahead.put((asyncio.ensure_future(answer(request)), size))
            finally:
                await ahead.put(None)

        reader = asyncio.create_task(read())
        running: list[asyncio.Future] = []  # the one whose answer is awaited
        try:
            while (item := await ahead.get()) is not None:
                future, size = item
                running[:] = [future]
                response = await future
                held["bytes"] -= size
                freed.set()
                yield response
            await reader  # a reader's failure ends the call with it
        finally:  # the call ended early (its client went away): nothing is left running
            reader.cancel()
            while not ahead.empty():
                if (left := ahead.get_nowait()) is not None:
                    running.append(left[0])
            for future in running:
                future.cancel()
