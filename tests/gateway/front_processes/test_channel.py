"""A channel on the event loop: one turn's messages leave as one datagram, in order with
those that carry an arena; a message too large for the socket is refused, not sent."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from gateway.core.inference import Tensor
from gateway.front_processes import wire
from gateway.front_processes.channel import Channel


def test_one_turns_messages_arrive_together_and_in_order():
    async def scenario():
        host_end, front_end = wire.channel_pair()
        received: list = []
        arrived = asyncio.Event()
        datagrams = 0

        def on_message(message, arena):
            received.append((message, arena))
            if message[0] == "last":
                arrived.set()

        front = Channel(front_end, lambda m, a: None, lambda: None)
        host = Channel(host_end, on_message, lambda: None)
        original = wire.receive

        def counting(sock, buffer):
            nonlocal datagrams
            result = original(sock, buffer)
            datagrams += 1
            return result

        wire.receive = counting
        try:
            for i in range(50):
                front.send(("m", i))
            big = [Tensor("x", "FP32", np.ones((256, 256), np.float32))]  # 256 KiB
            packed, arena = wire.pack_tensors(big)
            assert arena is not None
            front.send(("with_arena", packed), arena)
            front.send(("last",))
            await asyncio.wait_for(arrived.wait(), 5)
        finally:
            wire.receive = original
        kinds = [m[0] for m, _ in received]
        assert kinds == ["m"] * 50 + ["with_arena", "last"]
        assert [m[1] for m, _ in received[:50]] == list(range(50))
        message, mapped = received[50]
        np.testing.assert_array_equal(wire.unpack_tensors(message[1], mapped)[0].data, 1.0)
        assert datagrams == 3  # the 50, the arena's, the last
        with pytest.raises(wire.MessageTooLarge):
            front.send(("huge", b"x" * (front.limit + 1)))
        front.close()
        host.close()

    asyncio.run(scenario())


def test_a_closed_other_end_closes_the_channel():
    async def scenario():
        host_end, front_end = wire.channel_pair()
        closed = asyncio.Event()
        Channel(host_end, lambda m, a: None, closed.set)
        front_end.close()
        await asyncio.wait_for(closed.wait(), 5)

    asyncio.run(scenario())
