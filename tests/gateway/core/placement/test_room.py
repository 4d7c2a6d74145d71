"""Loads that wait for room (gateway/core/placement/room.py and the manager's booking loop),
with fake candidates: a word said while a load was trying is not lost, and the last try
at the load timeout books once or fails, never loops."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest

from backends.base import Device
from gateway.core.placement.inventory import DeviceMemory
from gateway.core.placement.ledger import Candidate, NoRoom
from gateway.core.placement.manager import MemoryManager
from gateway.core.placement.room import RoomWaiters

CPU = Device("cpu")


def test_a_notify_between_a_try_and_the_wait_is_not_lost():
    async def scenario():
        room = RoomWaiters()
        seen = room.generation
        room.notify()  # while the load was trying: nobody waited yet
        began = time.monotonic()
        assert await room.wait(seen, time.monotonic() + 5)
        assert time.monotonic() - began < 2.5  # the lost notify would wait the 5 s out
        assert not await room.wait(room.generation, time.monotonic() + 0.05)  # nothing new

    asyncio.run(scenario())


def manager_with_busy_models(timeout_s: float):
    """A CPU budget of 300 bytes, 200 of them booked by b and c, which are busy until
    the test says b is idle; nothing tells the manager when that happens."""
    memory = MemoryManager([DeviceMemory(CPU, 300, 300, 300)], evicts=True,
                           load_timeout_s=timeout_s)  # fmt: skip
    memory.ledger.book("b/1/0#0", "b", CPU, 100)
    memory.ledger.book("c/1/0#0", "c", CPU, 100)
    idle: set[str] = set()

    def candidates(name: str, busy_too: bool = False) -> list[Candidate]:
        held = {b.model for b in memory.ledger.bookings.values()} - {name}
        return [Candidate(m, 1.0) for m in sorted(held) if busy_too or m in idle]

    async def evict(names: tuple[str, ...]) -> list[str]:
        for victim in names:
            memory.ledger.release_model(victim)
        return list(names)

    return memory, idle, candidates, evict


def test_a_load_whose_last_try_finds_room_books_once_and_loads():
    memory, idle, candidates, evict = manager_with_busy_models(timeout_s=0.3)
    slots = [SimpleNamespace(allowed=[CPU], predicted=150, in_worker=True)]
    loads: list[list[Device]] = []

    def load(devices):
        loads.append(devices)
        raise RuntimeError("stop here")  # what was booked is what matters

    async def scenario():
        task = asyncio.ensure_future(memory.load("a", 1, slots, load, candidates, evict))
        await asyncio.sleep(0.1)
        idle.add("b")  # b falls idle unannounced: the last try finds it
        with pytest.raises(RuntimeError, match="stop here"):
            await asyncio.wait_for(task, 5)

    asyncio.run(scenario())
    assert loads == [[CPU]]  # one device for its one slot, booked once
    assert sorted(b.model for b in memory.ledger.bookings.values()) == ["c"]  # b evicted


def test_a_load_that_never_finds_room_fails_at_its_timeout_saying_it_waited():
    memory, _, candidates, evict = manager_with_busy_models(timeout_s=0.2)
    slots = [SimpleNamespace(allowed=[CPU], predicted=150, in_worker=True)]

    async def scenario():
        began = time.monotonic()
        with pytest.raises(NoRoom, match="waited 0.2 s .* busy with requests"):
            await asyncio.wait_for(memory.load("a", 1, slots, None, candidates, evict), 5)
        return time.monotonic() - began

    assert 0.15 < asyncio.run(scenario()) < 4.5  # at its 0.2 s timeout, not wait_for's 5 s
    assert sorted(b.model for b in memory.ledger.bookings.values()) == ["b", "c"]


def test_what_busy_models_cannot_free_fails_at_once():
    memory, _, candidates, evict = manager_with_busy_models(timeout_s=30)
    slots = [SimpleNamespace(allowed=[CPU], predicted=400, in_worker=True)]  # past the budget

    async def scenario():
        began = time.monotonic()
        with pytest.raises(NoRoom, match="does not fit"):
            await memory.load("a", 1, slots, None, candidates, evict)
        return time.monotonic() - began

    assert asyncio.run(scenario()) < 10  # at once, not at its 30 s timeout
