"""settle(): the heap that survives a load is frozen out of later collections, and what
an unload leaves as garbage is collected by the next settle. released(): memory a
client left goes back to the system once 16 MiB of it were let go."""

from __future__ import annotations

import asyncio
import gc
import weakref

from gateway.operation import heap


class Node:
    pass


def test_settle_freezes_survivors_and_collects_what_died_since():
    try:
        node = Node()
        node.itself = node  # a cycle: only the collector frees it
        heap.settle()
        assert gc.get_freeze_count() > 0
        alive = weakref.ref(node)
        del node
        gc.collect()  # ordinary collections skip the frozen heap
        assert alive() is not None
        heap.settle()  # an unload's settle: the frozen garbage goes
        assert alive() is None
    finally:
        gc.unfreeze()


def test_memory_let_go_is_trimmed_once_past_16_mib_in_a_turn_of_its_own(monkeypatch):
    trims: list[int] = []
    monkeypatch.setattr(heap, "_malloc_trim", trims.append)
    monkeypatch.setattr(heap, "_let_go", 0)
    monkeypatch.setattr(heap, "_trim_on", None)

    async def let_go() -> list[int]:
        for _ in range(16):  # a connection's 16 unfinished 4 MiB messages, cut at once
            heap.released(4 << 20)
        seen = list(trims)
        await asyncio.sleep(0)
        return seen

    assert asyncio.run(let_go()) == [] and trims == [0]  # once, after the rest went
    heap.released(1 << 20)  # below the bound again: nothing
    assert trims == [0]


def test_a_trim_whose_loop_stopped_before_it_ran_does_not_stop_later_ones(monkeypatch):
    trims: list[int] = []
    monkeypatch.setattr(heap, "_malloc_trim", trims.append)
    monkeypatch.setattr(heap, "_let_go", 0)
    monkeypatch.setattr(heap, "_trim_on", None)

    def let_go_and_leave() -> None:
        heap.released(32 << 20)  # its trim waits for a turn that never comes
        loop.stop()

    loop = asyncio.new_event_loop()
    loop.call_soon(let_go_and_leave)
    loop.run_forever()  # stopped, not closed (a test's server thread leaves it so)
    assert trims == []
    heap.released(32 << 20)  # no loop now: at once
    assert trims == [0]
    loop.close()
