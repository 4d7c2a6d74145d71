"""Requests on a stream to a model whose backend `streams` (a TorchServe handler): the
model answers the request as any other, through its batch, unless it chose to send
responses first (TorchServe's intermediate responses). Those travel like a decoupled
model's (gateway/core/decoupled.py: over the model-call socket into the request's
stream), and then its last one, marked final, is the answer too: the batch carries no
outputs for that request. A request whose handler sends nothing early costs a stream
entry and the task beside its run, no more.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

from accel_base.errors import GatewayError
from gateway.core.decoupled import EMPTY_FINAL, FINAL_PARAMETER, ResponseStreams, response_of
from gateway.core.inference import InferRequest, InferResponse
from gateway.core.scheduling.per_request import failure_error


async def stream_answers(
    request: InferRequest,
    streams: ResponseStreams,
    run: Callable[[InferRequest], Awaitable[InferResponse]],
    idle_timeout_s: float,
) -> AsyncIterator[InferResponse | GatewayError]:
    """The request's early responses as the model sends them, then its answer (the
    batch's, or the final one sent early); a failed early response comes as its error."""
    asked = [o.name for o in request.outputs]
    with streams.running(request, asked, run) as (stream, running):
        while True:
            while (sent := stream.take()) is not None:
                if sent.error is not None:
                    yield failure_error(request.model_name, *sent.error)
                else:
                    yield response_of(request, sent, request.model_name, request.model_version)
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
