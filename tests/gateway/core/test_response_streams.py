"""gateway/core/decoupled.py: a decoupled request's responses as the model sends them, its
run's failure, the idle timeout; a reader that falls behind has its stream closed, and
says why, and the worker's other streams go on."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from accel_base.errors import GatewayError, Unavailable
from gateway.core import decoupled
from gateway.core.decoupled import (
    EMPTY_FINAL,
    FINAL_PARAMETER,
    MAX_QUEUED,
    ResponseStreams,
    Sent,
    stream_responses,
)
from gateway.core.inference import InferRequest, InferResponse, RequestedOutput


def test_a_stream_whose_reader_falls_behind_is_closed_and_the_others_go_on(monkeypatch):
    monkeypatch.setattr(decoupled, "OVERFLOW_WAIT_S", 0.05)  # (a wait, not a measurement)

    async def scenario() -> None:
        streams = ResponseStreams()
        slow_token, slow = streams.open_stream()
        other_token, other = streams.open_stream()
        for _ in range(MAX_QUEUED):  # nobody reads the slow one
            await streams.deliver(slow_token, Sent([], {}, False, None))
        await streams.deliver(slow_token, Sent([], {}, False, None))  # one past: closed
        assert slow.overflowed
        await streams.deliver(other_token, Sent([], {}, True, None))
        assert other.queue.qsize() == 1 and not other.overflowed
        await streams.deliver(slow_token, Sent([], {}, True, None))  # gone: dropped
        assert slow.queue.qsize() == MAX_QUEUED
        with pytest.raises(Unavailable, match="slower than it sent them"):
            await slow.wait(None, "m")  # woken at once: it was closed

    asyncio.run(scenario())


def _request() -> InferRequest:
    return InferRequest("m", "1", "r1", {EMPTY_FINAL: True}, [], [RequestedOutput("OUT")])


async def _collect(streams: ResponseStreams, run, idle_s: float = 5.0) -> list:
    return [r async for r in stream_responses(_request(), streams, run, "m", "1", idle_s)]


def test_a_decoupled_stream_yields_what_the_model_sends_until_its_final():
    async def scenario() -> None:
        streams = ResponseStreams()

        async def run(request: InferRequest) -> InferResponse:
            token, asked = request.stream
            assert asked == ["OUT"] and request.outputs == []  # answered by the stream
            out = np.array([1], dtype=np.int32)
            await streams.deliver(token, Sent([("OUT", "INT32", out)], {}, False, None))
            await asyncio.sleep(0)
            await streams.deliver(token, Sent([], {}, False, ("InvalidArgument", "bad")))
            await streams.deliver(token, Sent([], {}, True, None))
            return InferResponse("m", "1", request.id)

        first, failed, last = await _collect(streams, run)
        assert first.outputs[0].data.tolist() == [1]
        assert first.parameters[FINAL_PARAMETER] is False
        assert isinstance(failed, GatewayError) and "bad" in failed.message
        assert last.outputs == [] and last.parameters[FINAL_PARAMETER] is True

    asyncio.run(scenario())


def test_a_decoupled_run_that_fails_before_responding_fails_the_stream():
    async def scenario() -> None:
        async def run(request: InferRequest) -> InferResponse:
            raise Unavailable("no instance")

        with pytest.raises(Unavailable, match="no instance"):
            await _collect(ResponseStreams(), run)

    asyncio.run(scenario())


def test_a_decoupled_model_that_goes_quiet_is_closed_after_the_idle_timeout():
    async def scenario() -> None:
        streams = ResponseStreams()

        async def run(request: InferRequest) -> InferResponse:
            await streams.deliver(request.stream[0], Sent([], {}, False, None))
            return InferResponse("m", "1", request.id)  # and nothing more: no final

        with pytest.raises(Unavailable, match="sent no response for 0.05 s"):
            await _collect(streams, run, idle_s=0.05)  # (a wait, not a measurement)
        assert not streams._streams  # closed

    asyncio.run(scenario())


def test_a_stream_is_cancelled_only_when_its_reader_leaves_before_the_end():
    async def scenario() -> tuple[bool, bool, bool]:
        streams = ResponseStreams()

        async def run(request: InferRequest) -> InferResponse:
            return InferResponse("m", "1")

        finished = InferRequest("m")
        with streams.running(finished, [], run) as (_, running):
            await running  # read to its end
        left = InferRequest("m")
        with pytest.raises(asyncio.CancelledError), streams.running(left, [], run):
            raise asyncio.CancelledError  # the reader's call was cancelled
        assert finished.stream is not None and left.stream is not None
        return (
            streams.cancelled(finished.stream[0]),
            streams.cancelled(left.stream[0]),
            streams.cancelled("s999"),
        )

    assert asyncio.run(scenario()) == (False, True, False)
