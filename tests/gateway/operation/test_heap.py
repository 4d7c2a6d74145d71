"""settle(): the heap that survives a load is frozen out of later collections, and what
an unload leaves as garbage is collected by the next settle. released(): memory a
client left goes back to the system once 16 MiB of it were let go. keep_freed_buffers():
large blocks come from the heap and stay there when freed."""

from __future__ import annotations

import asyncio
import ctypes
import gc
import subprocess
import sys
import weakref

import pytest

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


KEEP_CHECK = """
import ctypes, sys
from gateway.operation import heap

class Info(ctypes.Structure):  # glibc's struct mallinfo2
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
        "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
if sys.argv[1] == "keep":
    heap.keep_freed_buffers()
mapped_before = libc.mallinfo2().hblkhd
block = bytearray(8 << 20)  # a large tensor's buffer
mapped = libc.mallinfo2().hblkhd - mapped_before
del block
kept = libc.mallinfo2().fordblks  # freed bytes the heap holds on to
print(mapped, kept)
"""


def test_large_freed_buffers_stay_in_the_heap_for_the_next_request():
    if not hasattr(ctypes.CDLL(None), "mallinfo2"):
        pytest.skip("not glibc 2.33 or later: keep_freed_buffers does nothing here")

    def run(mode: str) -> tuple[int, int]:
        out = subprocess.run(
            [sys.executable, "-c", KEEP_CHECK, mode], capture_output=True, text=True, check=True
        )
        mapped, kept = out.stdout.split()
        return int(mapped), int(kept)

    mapped, _ = run("default")
    assert mapped >= 8 << 20  # glibc's default: a mapping of its own, unmapped when freed
    mapped, kept = run("keep")
    assert mapped == 0 and kept >= 8 << 20  # from the heap, and kept there once freed
