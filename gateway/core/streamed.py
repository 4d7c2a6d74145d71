"""Requests on a stream to a model whose backend `streams` (a TorchServe handler): the
model answers the request as any other, through its batch, unless it chose to send
responses first (TorchServe's intermediate responses). Those travel like a decoupled
model's (gateway/core/decoupled.py: over the model-call socket into the request's
stream), and then its last one, marked final, is the answer too: the batch carries no
outputs for that request. A request whose handler sends nothing early costs its stream's
queue and no more.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

from accel_base.errors import GatewayError
from gateway.core.decoupled import EMPTY_FINAL, FINAL_PARAMETER, ResponseStreams, Sent
from gateway.core.inference import InferRequest, InferResponse, Tensor
from gateway.core.scheduling.per_request import failure_error


def _response(request: InferRequest, sent: Sent, version: str) -> InferResponse:
    outputs = [Tensor(n, d, a) for n, d, a in sent.outputs]
    parameters = dict(sent.parameters)
    if request.parameters.get(EMPTY_FINAL) is True:  # the caller asked which is last
        parameters[FINAL_PARAMETER] = sent.final
    return InferResponse(request.model_name, version, request.id, parameters, outputs)


async def stream_answers(
    request: InferRequest,
    streams: ResponseStreams,
    run: Callable[[InferRequest], Awaitable[InferResponse]],
    idle_timeout_s: float,
) -> AsyncIterator[InferResponse | GatewayError]:
    """The request's early responses as the model sends them, then its answer (the
    batch's, or the final one sent early); a failed early response comes as its error."""
    token, stream = streams.open_stream()
    request.stream = (token, [o.name for o in request.outputs])
    running = asyncio.get_running_loop().create_task(run(request))
    running.add_done_callback(lambda _: stream.wake())
    try:
        while True:
            while (sent := stream.take()) is not None:
                if sent.error is not None:
                    yield failure_error(request.model_name, *sent.error)
                else:
                    yield _response(request, sent, request.model_version)
                if sent.final:
                    await running  # the batch may still be returning; its failure is ours
                    return
            if running.done():
                answer = running.result()  # its failure, if it failed, is the stream's
                if answer.outputs:  # answered through the batch: nothing was sent early
                    if request.parameters.get(EMPTY_FINAL) is True:
                        answer.parameters[FINAL_PARAMETER] = True
                    yield answer
                    return
            # While the request waits or runs, its queue and run timeouts bound it; after,
            # its final response must come within the idle timeout.
            await stream.wait(idle_timeout_s if running.done() else None, request.model_name)
    finally:
        streams.close(token)
        if not running.done():
            running.cancel()
