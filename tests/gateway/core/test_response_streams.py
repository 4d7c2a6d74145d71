"""gateway/core/decoupled.py's ResponseStreams: a reader that falls behind has its stream
closed, and says why; the worker's other streams go on."""

from __future__ import annotations

import asyncio

import pytest

from accel_base.errors import Unavailable
from gateway.core import decoupled
from gateway.core.decoupled import MAX_QUEUED, ResponseStreams, Sent


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
