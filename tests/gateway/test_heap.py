"""settle(): the heap that survives a load is frozen out of later collections, and what
an unload leaves as garbage is collected by the next settle."""

from __future__ import annotations

import gc
import weakref

from gateway import heap


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
